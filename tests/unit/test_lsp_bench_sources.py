"""`bench lsp` tells answers that needed a model call from those served from earlier work,
and counts the cancelled requests."""

from __future__ import annotations

import pytest

from lsp_server.bench.lsp_bench import answer_source, summarize


def event(first, source, outcome="completed", cold=False):
    return {"cold": cold, "first_token_s": first, "final_s": (first or 0.0) + 0.1, "outcome": outcome,
            "prefilled_tokens": None, "cancel_idle_s": None, "answer_source": source}


def test_the_source_of_an_answer_comes_from_the_servers_stats_for_it():
    assert answer_source({"known_tokens": 0, "known_source": "", "rounds": 3}) == "model"
    assert answer_source({"known_tokens": 5, "known_source": "generation", "rounds": 0}) == "generation"
    assert answer_source({"known_tokens": 5, "known_source": "background", "rounds": 2}) == "background"
    assert answer_source({}) == "unattributed"  # no stats tied to the request


def test_model_calls_and_answers_from_earlier_work_have_their_own_first_text_latency():
    events = ([event(2.0, "model", cold=True)]
              + [event(0.4, "model"), event(0.6, "model"), event(0.8, "model")]
              + [event(0.01, "generation")] * 5 + [event(0.02, "background")]
              + [event(None, "unattributed", outcome="cancelled")] * 3
              + [event(0.3, "unattributed", outcome="cancelled")])

    s = summarize(events, [], typing_s=1.0)

    assert s["first_token_model_p50_s"] == pytest.approx(0.6)  # the three model calls, not the cold one
    assert s["first_token_reused_p50_s"] == pytest.approx(0.01)
    # One median over everything warm says 0.01 s: six of the ten were served from earlier work.
    assert s["first_token_warm_p50_s"] == pytest.approx(0.01)
    assert s["warm_first_text_by_source"] == {"model": 3, "generation": 5, "background": 1, "unattributed": 1}
    assert s["cancelled"] == 4 and s["cancelled_before_first_token"] == 3
