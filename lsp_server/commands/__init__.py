"""The bodies of the console script's subcommands that are not a room of their own:
`complete` (one completion, no editor), `doctor`, `models fetch|list`, and the demo
(`python -m lsp_server.commands.demo`). `cli.py` parses; `serve` is server/, `bench` is bench/."""
