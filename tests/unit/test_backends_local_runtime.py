"""Pieces of engine assembly that need no model weights."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tokenizers import AddedToken

from lsp_server.backends import local_runtime
from lsp_server.backends.local_runtime import resolve_quant, special_token_ids


def test_every_special_added_token_stops_generation_but_ordinary_added_tokens_do_not() -> None:
    # Qwen2.5-Coder has 20 special added tokens; a completion once printed <|fim_pad|> x8
    # when only the end-of-text and three FIM markers stopped it.
    tokenizer = SimpleNamespace(added_tokens_decoder={
        151643: AddedToken("<|endoftext|>", special=True),
        151662: AddedToken("<|fim_pad|>", special=True),
        151664: AddedToken("<|file_sep|>", special=True),
        151700: AddedToken("my_word", special=False),
    })
    assert special_token_ids(tokenizer) == {151643, 151662, 151664}


@pytest.mark.parametrize("native_runs", [True, False])
def test_auto_weights_are_the_gguf_blocks_on_a_cpu_the_native_kernels_serve(native_runs, monkeypatch) -> None:
    monkeypatch.setattr(local_runtime, "native_kernels_run", lambda: native_runs)
    assert resolve_quant("auto", "cpu", has_gguf=True) == ("gguf" if native_runs else "bf16")
    assert resolve_quant("auto", "cpu", has_gguf=False) == "bf16"  # a model without a GGUF file
    assert resolve_quant("auto", "cuda", has_gguf=True) == "bf16"
    assert resolve_quant("gguf", "cpu", has_gguf=True) == "gguf"  # asked for: as asked


def test_the_kernel_lines_name_the_cpu_and_why_a_model_runs_dense() -> None:
    from lsp_server.kernels import native

    lines = local_runtime.kernel_lines({"target": "gguf", "draft": "bf16"})
    assert lines[0].startswith("CPU: ")
    if native.available():
        assert f"specfill native {native.variant()}" in lines[1]
    assert lines[-1].startswith("draft: dense torch weights") and "native kernels not used: " in lines[-1]


def test_round_costs_from_a_busy_moment_are_not_used() -> None:
    from lsp_server.backends.local_runtime import plausible
    from lsp_server.engine.costs import RowCosts

    assert plausible(RowCosts(target=(0.030, 0.031, 0.032), draft=0.012))
    # Another process had the cores: the 0.5B draft "cost" more than the 1.5B target.
    assert not plausible(RowCosts(target=(0.35, 0.32, 0.33), draft=1.43))


def test_a_table_where_more_rows_timed_cheaper_is_timed_again(monkeypatch) -> None:
    from lsp_server.backends import local_runtime
    from lsp_server.engine.costs import RowCosts

    noisy = RowCosts(target=(0.050, 0.079, 0.139, 0.090), draft=0.009)  # a forced-AVX2 load
    clean = RowCosts(target=(0.037, 0.045, 0.062, 0.080), draft=0.011)
    assert not local_runtime.rising(noisy) and local_runtime.rising(clean)
    assert local_runtime.rising(RowCosts(target=(0.038, 0.037, 0.064), draft=0.01))  # within noise
    tables = iter([noisy, clean])
    monkeypatch.setattr(local_runtime, "measure_costs", lambda engine, prompt: next(tables))

    class Engine:
        costs = None

    class Options:
        max_k = 0

    engine, options, said = Engine(), Options(), []
    local_runtime.time_rounds(engine, [1, 2], options, said.append)
    assert engine.costs == clean and options.max_k >= 1 and "measured round costs" in said[-1]
    tables = iter([noisy] * 3)  # noisy every time: still used, plausible as they are
    local_runtime.time_rounds(engine, [1, 2], options, said.append)
    assert engine.costs == noisy and next(tables, None) is None


def test_the_load_says_where_the_weight_copies_live(monkeypatch) -> None:
    from lsp_server.kernels import huge_pages

    monkeypatch.setattr(huge_pages, "enabled", lambda: False)
    assert "4 KB pages" in local_runtime.huge_pages_line()
    monkeypatch.setattr(huge_pages, "enabled", lambda: True)
    monkeypatch.setattr(huge_pages, "huge_bytes", lambda: 0)
    assert "transparent huge pages are off" in local_runtime.huge_pages_line()
    monkeypatch.setattr(huge_pages, "huge_bytes", lambda: 1_240_000_000)
    assert local_runtime.huge_pages_line() == "weight copies in huge pages: 1.24 GB of the process's memory"
    monkeypatch.setattr(huge_pages, "huge_bytes", lambda: None)
    assert "does not report" in local_runtime.huge_pages_line()
