"""A benchmark's arguments as `specfill bench NAME ...` would parse them, for tests that run it."""

from __future__ import annotations

import argparse


def parse(module, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    args.command, args.bench_command = "bench", module.__name__.rsplit(".", 1)[-1].replace("_bench", "")
    return args
