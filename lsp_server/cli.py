"""specfill serve | complete | bench | models | doctor"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from lsp_server import __version__


def _serve(args: argparse.Namespace) -> int:
    from lsp_server.server.rpc_protocol import quiet_pygls
    from lsp_server.server.server import create_server

    level = getattr(logging, args.log_level.upper())
    # stderr is the editor's output panel; --log-file moves the log out of it.
    output = {"filename": args.log_file} if args.log_file else {"stream": sys.stderr}
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        **output)
    quiet_pygls(level)
    server = create_server()
    if args.tcp:
        try:
            host, port = tcp_address(args.tcp, args.allow_remote)
        except ValueError as exc:
            print(f"specfill serve: {exc}", file=sys.stderr)
            return 2
        server.start_tcp(host, port)
    else:
        from lsp_server.server.stdio import start_io

        start_io(server)
    return 0


def tcp_address(spec: str, allow_remote: bool = False) -> tuple[str, int]:
    """`[HOST:]PORT` -> (host, port). The server has no authentication and reads files the
    client names, so only loopback is allowed unless the user says otherwise."""
    import ipaddress

    host, _, port = spec.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--tcp wants [HOST:]PORT with a port from 1 to 65535, got {spec!r}")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback and not allow_remote:
        raise ValueError(f"--tcp {spec}: {host} is not a loopback address, and anyone who can "
                         "reach it could use this server; add --allow-remote if you mean it")
    return host, int(port)


def _complete(args: argparse.Namespace) -> int:
    from lsp_server.commands.complete import complete_file

    return complete_file(args)


def _doctor(args: argparse.Namespace) -> int:
    from lsp_server.commands.doctor import doctor

    return doctor(args)


def _bench(args: argparse.Namespace) -> int:
    return int(args.bench_func(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specfill", description="Local code completion over LSP with speculative decoding")
    parser.add_argument("--version", action="version", version=f"specfill {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the language server (stdio by default)")
    serve.add_argument("--stdio", action="store_true", help="accepted for clients that add it")
    serve.add_argument("--tcp", metavar="[HOST:]PORT", help="listen on TCP (127.0.0.1 by default)")
    serve.add_argument("--allow-remote", action="store_true",
                       help="let --tcp bind an address other than loopback (no authentication!)")
    serve.add_argument("--log-file", help="write logs here instead of stderr")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(func=_serve)

    complete = sub.add_parser("complete", help="complete one cursor position in a file, no LSP")
    complete.add_argument("file")
    complete.add_argument("--line", type=int, required=True, help="0-based line")
    complete.add_argument("--col", type=int, required=True, help="0-based column (UTF-16 units)")
    complete.add_argument("--language", help="languageId (default: from the file extension)")
    complete.add_argument("--max-new-tokens", type=int, default=0)
    complete.add_argument("--mode", choices=["adaptive", "fixed", "off"], default="adaptive")
    complete.add_argument("--target", help="target model (registry name, HF dir or .gguf)")
    complete.add_argument("--draft", help="draft model")
    complete.add_argument("--dtype", default="auto")
    complete.set_defaults(func=_complete)

    from lsp_server.commands.models import add_models_subcommands

    add_models_subcommands(sub)

    doctor = sub.add_parser("doctor", help="versions, model files, memory and a smoke decode")
    doctor.add_argument("--cache-dir", default=None)
    doctor.add_argument("--no-decode", action="store_true", help="skip the smoke decode")
    doctor.set_defaults(func=_doctor)

    bench = sub.add_parser("bench", help="benchmarks: engine | lsp | policy | peers | bound")
    bench_sub = bench.add_subparsers(dest="bench_command", required=True)
    from lsp_server.bench import register_benchmarks

    register_benchmarks(bench_sub)
    bench.set_defaults(func=_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: Any = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    raise SystemExit(main())
