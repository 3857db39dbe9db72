"""One completion from cursor to cleaned stream, and what the server keeps per session for
it; no pygls here (the server, a floor up, speaks LSP).

`service` the entry point the server's handler calls, `prompts` the prompt for a cursor,
`streams` the generations in flight and what each request sees, `background` warms and
precomputes while the user rests, `precompute` their bookkeeping, `documents` the text and
tree per URI, `stats` the totals behind `specfill/stats`, `protocol` specfill's own methods
and payloads. Importing this package imports none of them.
"""
