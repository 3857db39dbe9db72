"""`specfill bench prefill`'s modes set the feeds and the kernels' wide path, and put them back."""

import pytest

from lsp_server.bench import prefill_bench
from lsp_server.engine import lean_step
from lsp_server.kernels import native

needs_lib = pytest.mark.skipif(not native.available(), reason=native.why_unavailable())


@needs_lib
def test_each_mode_sets_its_feeds_and_restores_the_engine_settings():
    before = lean_step.NATIVE_MAX_ROWS, native.wide_rows()
    native.set_wide_rows(lean_step.WIDE_ROWS)
    try:
        with prefill_bench.mode("rows16") as chunk:
            assert chunk == lean_step.ROW_BY_ROW_MAX_ROWS and native.wide_rows() == 0
        with prefill_bench.mode("torch512") as chunk:
            assert chunk == 512 and lean_step.NATIVE_MAX_ROWS < chunk  # past the one-call layers
        with prefill_bench.mode("engine") as chunk:
            assert chunk == lean_step.NATIVE_MAX_ROWS and native.wide_rows() == lean_step.WIDE_ROWS
        assert (lean_step.NATIVE_MAX_ROWS, native.wide_rows()) == (before[0], lean_step.WIDE_ROWS)
    finally:
        native.set_wide_rows(before[1])


def test_it_is_a_registered_benchmark():
    from lsp_server.bench import BENCHMARKS

    assert BENCHMARKS["prefill"][0] == "lsp_server.bench.prefill_bench"
