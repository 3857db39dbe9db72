"""The language server: the pygls LanguageServer and its JSON-RPC layer, the only modules
here, and with the scripted client (lsp_server/client.py) the only ones that know pygls and
lsprotocol.

`server` holds the LanguageServer and its thin handlers, `rpc_protocol` the JSON-RPC layer
under them, `stdio` the transport. What a handler calls is a floor down, in
`lsp_server.completion`. Importing this package imports none of them.
"""
