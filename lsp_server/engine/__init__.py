"""The speculative decoding engine. Never imports pygls or tree-sitter.

`types` is torch-free so that `syntax/` and the server can build requests and policies
without loading torch; everything else in this package may use torch.
"""
