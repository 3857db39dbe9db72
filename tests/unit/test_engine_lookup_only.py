"""`DraftPolicy(model_draft=False)`: prompt lookup alone, the draft model never runs."""

from __future__ import annotations

import random

import pytest
import torch

from lsp_server.engine.speculative import SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, Finished, StopRule
from tests.tiny_models import CharTokenizer, tiny_model
from tests.unit.test_engine_greedy import plain_greedy

torch.set_grad_enabled(False)


def lookup_only(k: int = 6, n: int = 30, model_draft: bool = False, lookup: bool = True) -> DraftPolicy:
    return DraftPolicy(context="test", k_init=k, k_min=k, k_max=k, max_new_tokens=n,
                       stop=StopRule("none"), draft_p_min=0.0, mode="fixed",
                       prompt_lookup=lookup, model_draft=model_draft)


def generate(engine: SpeculativeEngine, prompt: list[int], policy: DraftPolicy) -> Finished:
    final = list(engine.generate(CompletionRequest("r", tuple(prompt), policy)))[-1]
    assert isinstance(final, Finished)
    return final


class ForwardCounter:
    """Counts forward passes by their embedding lookups: one per pass, whether the engine
    runs the model's own forward or lean_step's."""

    def __init__(self, model: torch.nn.Module):
        self.calls = 0
        model.get_input_embeddings().register_forward_hook(self._count)

    def _count(self, *_) -> None:
        self.calls += 1


@pytest.fixture(scope="module")
def target():
    return tiny_model(seed=1)


@pytest.fixture
def counted_draft():
    draft = tiny_model(seed=11, hidden=16, layers=1)
    return draft, ForwardCounter(draft)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lookup_only_is_lossless_and_never_runs_the_draft_model(target, counted_draft, seed):
    draft, counter = counted_draft
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    prompt = random.Random(seed).choices(range(6), k=30)  # small alphabet: n-gram matches
    result = generate(engine, prompt, lookup_only())
    assert list(result.token_ids) == plain_greedy(target, prompt, 30)
    assert counter.calls == 0
    assert set(result.stats.drafters) == {"lookup"}
    assert result.stats.drafters["lookup"].drafted > 0


def test_with_model_draft_on_the_same_engine_uses_the_draft_model(target, counted_draft):
    draft, counter = counted_draft
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    prompt = list(range(40))  # no repeated n-gram: lookup has nothing to offer
    result = generate(engine, prompt, lookup_only(n=12, model_draft=True))
    assert counter.calls > 0
    assert result.stats.drafters["draft"].drafted > 0


def test_rounds_without_a_lookup_match_decode_plainly(target, counted_draft):
    draft, counter = counted_draft
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    prompt = list(range(40))
    result = generate(engine, prompt, lookup_only(n=12))
    s = result.stats
    lookup_rounds = s.drafters["lookup"].rounds if "lookup" in s.drafters else 0
    assert s.speculative_rounds == lookup_rounds
    assert s.plain_rounds == s.rounds - lookup_rounds > 0
    assert s.k_trace.count(0) == s.plain_rounds
    assert counter.calls == 0
    assert list(result.token_ids) == plain_greedy(target, prompt, 12)


def test_lookup_only_without_lookup_is_plain_decoding(target, counted_draft):
    draft, counter = counted_draft
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    result = generate(engine, prompt, lookup_only(n=10, lookup=False))
    assert result.stats.drafted == 0 and result.stats.plain_rounds == result.stats.rounds == 9
    assert counter.calls == 0
    assert list(result.token_ids) == plain_greedy(target, prompt, 10)
