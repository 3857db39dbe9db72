"""The accept session's summary: what background work costs a real request is the same
spot's probe with a precompute running minus with the worker idle, in ms and in layers."""

from __future__ import annotations

from lsp_server.bench.accept_session import TARGET_LAYERS, summarize


def event(spot: int, kind: str, first_ms: float, rounds: int = 0, verify_s: float = 0.0) -> dict:
    return {"spot": spot, "kind": kind, "first_text_ms": first_ms, "rounds": rounds, "verify_s": verify_s,
            "known_source": "generation", "known_tokens": 4, "prefilled_tokens": 0}


def test_the_probe_delay_is_taken_spot_by_spot_and_counted_in_decoder_layers():
    step_s = 0.028  # one target step of 28 ms: a layer of 1 ms
    events = [event(0, "first", 900.0, rounds=2, verify_s=2 * step_s),
              event(0, "probe-busy", 3.0), event(0, "probe-idle", 2.0),
              event(1, "probe-busy", 2.5), event(1, "probe-idle", 3.0),
              event(2, "probe-busy", 4.5), event(2, "probe-idle", 1.0),
              event(3, "probe-busy", 9.0)]  # no idle probe there: not a pair
    out = summarize(events, [0.001, 0.002], {})
    assert out["decoder_layer_ms"] == 28.0 / TARGET_LAYERS
    assert out["probe_delay_spots"] == 3
    assert out["probe_delay_p50_ms"] == 1.0 and out["probe_delay_max_ms"] == 3.5
    assert out["probe_delay_max_layers"] == 3.5 / out["decoder_layer_ms"]
    assert out["preempt_max_layers"] == 2.0 / out["decoder_layer_ms"]
