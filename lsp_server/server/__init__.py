"""The language server: the only room that knows pygls and lsprotocol.

`server` holds the pygls LanguageServer and its thin handlers, `rpc_protocol` the JSON-RPC
layer under them, `completion` one completion from cursor to cleaned stream, `documents`
the text and tree per URI, `protocol` specfill's own methods and payloads, `stats` the
totals behind `specfill/stats`, `client` a scripted client for the demo and benchmarks.
Importing this package imports none of them: `completion` and `documents` load no pygls.
"""
