"""specfill: an LSP inline-completion server backed by a speculative decoding engine."""

__version__ = "0.1.0"
