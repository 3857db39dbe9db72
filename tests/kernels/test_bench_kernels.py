"""`specfill bench kernels --compare-pages` on small matrices: both placements built (the one
meant for 4 KB pages outside the arena, the other in it), timed alternately, reported, and
the SPECFILL_HUGE_PAGES setting put back as it was."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from lsp_server.bench import kernel_speed
from lsp_server.kernels import huge_pages, native


@pytest.mark.skipif(not native.available(), reason="the native kernels are not built")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the arena is Linux only")
@pytest.mark.parametrize("setting", [None, "1"])
def test_compare_pages_times_both_placements_and_restores_the_setting(monkeypatch, capsys, setting):
    if setting is None:
        monkeypatch.delenv(huge_pages.ENV, raising=False)
    else:
        monkeypatch.setenv(huge_pages.ENV, setting)
    arenas = []

    def small_model(seed: int = 0, model: str = "target"):
        arenas.append(huge_pages.enabled())  # what the copies were made under
        rng = np.random.default_rng(seed)
        return [kernel_speed.random_matrix("m", kernel_speed.Q4_K, 2048, 1024, rng)]  # 1.2 MB

    monkeypatch.setattr(kernel_speed, "build_model", small_model)
    monkeypatch.setattr(kernel_speed, "PAGE_ROUNDS", 2)
    kernel_speed.compare_pages([1, 3], passes=1)
    out = capsys.readouterr().out
    assert arenas == [False, True]
    assert os.environ.get(huge_pages.ENV) == setting
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["1"], ["3"])]
    assert [r[0] for r in rows] == ["1", "3"] and all(float(r[3]) > 0 for r in rows)
