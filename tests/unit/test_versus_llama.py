"""`bench llamacpp`'s bookkeeping: interleaved rounds, paired ratios, the tests asked for."""

from __future__ import annotations

import argparse

import pytest

from lsp_server.bench.versus_llama import add_arguments, cases, run_rounds, summarize


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_one_prefill_and_a_decode_at_each_context_length():
    assert cases(parse(["--depths", "0,512,2048"])) == [
        ("pp512", 512, 0), ("tg128 @ d0", 128, 0), ("tg128 @ d512", 128, 512), ("tg128 @ d2048", 128, 2048)]


def test_the_side_that_goes_first_alternates_and_each_round_is_paired():
    calls = []

    class Ours:
        def rate(self, name, n, depth):
            calls.append("specfill")
            return 30.0 if name.startswith("tg") else 120.0

    def theirs(name, n, depth):
        calls.append("llama.cpp")
        # the machine slows down in the second round: both sides of that round see it
        return (25.0 if name.startswith("tg") else 100.0) * (1.0 if calls.count("llama.cpp") <= 2 else 2.0)

    rows = run_rounds(parse(["--rounds", "2", "--depths", "0"]), Ours(), theirs)

    assert calls == ["specfill", "llama.cpp"] * 2 + ["llama.cpp", "specfill"] * 2
    s = summarize(rows)
    assert s["pp512"]["ratio"] == pytest.approx((1.2 + 0.6) / 2)  # the median of the rounds' own ratios
    assert s["tg128 @ d0"]["ratio_min"] == pytest.approx(0.6) and s["tg128 @ d0"]["rounds"] == 2
