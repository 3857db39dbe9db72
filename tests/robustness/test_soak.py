"""The soak in the suite: 100,000 didChange + 10,000 completions (about 4 minutes on 2
busy cores; `make soak` runs the same session on its own): RSS growth after warm-up within
5 %, the per-request tables bounded, the document still in sync at the end."""

from __future__ import annotations

from tests.robustness.soak import run_soak

CHANGES, COMPLETIONS = 100_000, 10_000


def test_a_long_session_does_not_grow(tiny_pair_dirs, figures):
    result = run_soak(*tiny_pair_dirs, CHANGES, COMPLETIONS)
    for name, value in result.items():
        figures[f"soak: {name}"] = value
    assert result["completions answered"] == COMPLETIONS
    assert result["document in sync at the end"]
    assert result["rss growth after warm-up %"] <= 5.0
    tables = result["largest table sizes"]
    assert tables["pygls_request_futures"] <= 25  # the completions a client has in flight
    assert tables["inflight_generations"] <= 1 and tables["documents"] == 1
    assert tables["pygls_result_types"] == 0
    final = result["final table sizes"]
    assert final["pygls_request_futures"] <= 1 and final["inflight_generations"] == 0
