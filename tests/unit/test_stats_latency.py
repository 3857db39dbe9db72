"""Inter-token latency counts a round's tokens at the pace they arrive, not 0 s apart."""

from lsp_server.engine.types import Stats


def test_tokens_that_arrive_together_share_the_gap_before_them() -> None:
    stats = Stats(token_times_s=[0.10, 0.18, 0.18, 0.18, 0.18, 0.20, 0.26, 0.26])

    assert stats.deliveries() == [(0.10, 1), (0.18, 4), (0.20, 1), (0.26, 2)]
    latencies = stats.inter_token_latencies()
    assert len(latencies) == 7  # every token after the first delivery
    assert [round(x, 6) for x in latencies] == [0.02, 0.02, 0.02, 0.02, 0.02, 0.03, 0.03]
    assert [round(x, 6) for x in stats.delivery_gaps()] == [0.08, 0.02, 0.06]
    d = stats.to_dict()
    assert round(d["itl_p50_s"], 6) == 0.02 and round(d["delivery_gap_p50_s"], 6) == 0.06


def test_no_latencies_before_a_second_delivery() -> None:
    assert Stats(token_times_s=[0.1, 0.1]).inter_token_latencies() == []
    assert Stats().to_dict()["itl_p50_s"] is None
