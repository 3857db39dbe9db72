"""The per-round k decisions: +2/-1, the confidence-stop exception, bounds, entropy hysteresis."""

from __future__ import annotations

from lsp_server.engine.controller import AcceptanceMemory, Controller
from lsp_server.engine.types import DraftPolicy, StopRule


def policy(**kw) -> DraftPolicy:
    base = dict(context="test", k_init=4, k_min=1, k_max=8, max_new_tokens=64, stop=StopRule("none"),
                draft_p_min=0.5, mode="adaptive", entropy_high=0.0, entropy_low=0.0)
    return DraftPolicy(**{**base, **kw})


def test_full_acceptance_grows_k_by_two_and_a_rejection_shrinks_it_by_one() -> None:
    c = Controller(policy())
    c.observe(drafted=4, accepted=4, target_entropy=None)
    assert c.next_k() == 6
    c.observe(drafted=6, accepted=2, target_entropy=None)
    assert c.next_k() == 5


def test_a_confidence_cut_whose_unsure_last_token_is_rejected_keeps_k() -> None:
    c = Controller(policy())
    c.observe(drafted=3, accepted=2, target_entropy=None)  # cut at 3 of 4: only the last was wrong
    assert c.next_k() == 4
    c.observe(drafted=3, accepted=1, target_entropy=None)  # a confident token was wrong too
    assert c.next_k() == 3


def test_without_a_confidence_stop_every_rejection_shrinks_k() -> None:
    c = Controller(policy(draft_p_min=0.0))
    c.observe(drafted=3, accepted=2, target_entropy=None)
    assert c.next_k() == 3


def test_k_stays_within_the_policy_bounds_and_fixed_mode_never_moves() -> None:
    c = Controller(policy(k_init=7))
    c.observe(drafted=7, accepted=7, target_entropy=None)
    assert c.next_k() == 8
    low = Controller(policy(k_init=1))
    low.observe(drafted=1, accepted=0, target_entropy=None)
    assert low.next_k() == 1
    fixed = Controller(policy(mode="fixed"))
    fixed.observe(drafted=4, accepted=0, target_entropy=None)
    assert fixed.next_k() == 4


def test_high_entropy_switches_to_plain_rounds_and_back_with_hysteresis() -> None:
    c = Controller(policy(entropy_high=3.0, entropy_low=1.5))
    c.observe(drafted=4, accepted=1, target_entropy=4.0)
    assert c.next_k() == 0
    c.observe(drafted=0, accepted=0, target_entropy=2.0)  # EMA 3.0: between the marks, stays plain
    assert c.next_k() == 0
    c.observe(drafted=0, accepted=0, target_entropy=0.0)  # EMA 1.5 is not below the low mark
    assert c.next_k() == 0
    c.observe(drafted=0, accepted=0, target_entropy=0.0)  # EMA 0.75
    assert c.next_k() > 0


def test_acceptance_memory_suggests_a_starting_k_after_enough_rounds() -> None:
    memory = AcceptanceMemory()
    p = policy()
    assert memory.suggested_k(p) == 4
    for _ in range(8):
        memory.record("test", drafted=6, accepted=5)
    assert memory.suggested_k(p) == 6
