"""Speculative sampling follows the target's distribution exactly (rejection sampling)."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import replace

import pytest
import torch

from lsp_server.engine.sampling import Sampling, verify_sampled, warp
from lsp_server.engine.speculative import EngineOptions, SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, StopRule
from lsp_server.kernels import native
from lsp_server.kernels.gguf import load_gguf_model
from tests.tiny_models import CharTokenizer, tiny_model
from tests.unit.test_kernels_gguf import write_gguf

torch.set_grad_enabled(False)
VOCAB, LENGTH, RUNS = 3, 2, 1000
# Chi-square critical value for 8 degrees of freedom (9 outcomes) at significance 0.001.
CHI2_CRIT_8DOF_0001 = 26.12


def chi_square(counts: Counter, expected: dict, n: int) -> float:
    return sum((counts.get(o, 0) - n * p) ** 2 / (n * p) for o, p in expected.items())


def exact_sequence_probs(model, prompt, s: Sampling) -> dict[tuple[int, ...], float]:
    out = {}
    for seq in itertools.product(range(VOCAB), repeat=LENGTH):
        prob, ids = 1.0, list(prompt)
        for tok in seq:
            p = warp(model(input_ids=torch.tensor([ids])).logits[0, -1], s)
            prob *= float(p[tok])
            ids.append(tok)
        out[seq] = prob
    return out


@pytest.fixture(scope="module")
def pair():
    target = tiny_model(seed=11, vocab=VOCAB)
    draft = tiny_model(seed=12, vocab=VOCAB, hidden=16, layers=1)
    with torch.no_grad():
        target.lm_head.weight.mul_(0.08)  # soften: every outcome has real mass
        draft.lm_head.weight.mul_(0.12)
    return target, draft


def test_speculative_sampling_matches_target_distribution_and_draft_sampling_does_not(pair):
    target, draft = pair
    s = Sampling(temperature=1.0)
    prompt = (0, 1, 2)
    expected = exact_sequence_probs(target, prompt, s)
    draft_dist = exact_sequence_probs(draft, prompt, s)
    assert min(expected.values()) > 0.002  # chi-square needs expected counts >= ~3

    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    policy = DraftPolicy(context="t", k_init=2, k_min=1, k_max=2, max_new_tokens=LENGTH,
                         stop=StopRule("none"), draft_p_min=0.0, mode="fixed",
                         prompt_lookup=False)
    counts: Counter = Counter()
    drafted = accepted = 0
    for i in range(RUNS):
        # a context of its own each time: no earlier answer's length caps the draft (a
        # LENGTH-token answer left after its first token needs no more draft tokens)
        asked = replace(policy, context=f"t{i}")
        final = list(engine.generate(CompletionRequest(f"r{i}", prompt, asked, 1.0, 1.0, i)))[-1]
        counts[final.token_ids] += 1
        drafted += final.stats.drafted
        accepted += final.stats.accepted
    assert drafted > 0 and 0 < accepted < drafted  # the draft was really used and judged
    assert chi_square(counts, expected, RUNS) < CHI2_CRIT_8DOF_0001

    # Sampling straight from the draft is measurably different from the target.
    g = torch.Generator().manual_seed(0)
    outcomes = list(draft_dist)
    picks = torch.multinomial(torch.tensor([draft_dist[o] for o in outcomes]), RUNS, True,
                              generator=g)
    draft_counts = Counter(outcomes[int(i)] for i in picks)
    assert chi_square(draft_counts, expected, RUNS) > CHI2_CRIT_8DOF_0001


@pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.why_unavailable()}")
def test_speculative_sampling_follows_the_target_with_the_drafts_pruned_head(pair, tmp_path):
    """The pruned draft head gives most ids probability zero (draft_head.py): a proposal
    with zeros must still leave the target's distribution exact."""
    target, _ = pair
    # A GGUF draft (its head's rows are blocks: any prefix of them prunes), 32 wide for Q8_0.
    dense = tiny_model(seed=12, vocab=VOCAB, hidden=32, layers=1, dtype=torch.float32)
    with torch.no_grad():
        dense.lm_head.weight.mul_(0.12)
    dense.config.save_pretrained(tmp_path)
    write_gguf(dense, tmp_path / "model.gguf")
    draft = load_gguf_model(tmp_path, tmp_path / "model.gguf")
    s = Sampling(temperature=1.0)
    prompt = (0, 1, 0)  # id 2 is neither common (ids < 2) nor in the prompt: the draft can't say it
    expected = exact_sequence_probs(target, prompt, s)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[], options=EngineOptions(draft_vocab=2))
    assert engine.drafter.head is not None and engine.drafter.head.n_common == 2
    policy = DraftPolicy(context="t", k_init=2, k_min=1, k_max=2, max_new_tokens=LENGTH,
                         stop=StopRule("none"), draft_p_min=0.0, mode="fixed", prompt_lookup=False)
    counts: Counter = Counter()
    drafted = 0
    for i in range(RUNS):
        # a context of its own each time: no earlier answer's length caps the draft (a
        # LENGTH-token answer left after its first token needs no more draft tokens)
        asked = replace(policy, context=f"t{i}")
        final = list(engine.generate(CompletionRequest(f"r{i}", prompt, asked, 1.0, 1.0, i)))[-1]
        counts[final.token_ids] += 1
        drafted += final.stats.drafted
    assert drafted > 0
    assert chi_square(counts, expected, RUNS) < CHI2_CRIT_8DOF_0001


def test_rejection_rule_first_token_follows_p_for_one_hot_and_soft_drafts():
    g = torch.Generator().manual_seed(0)
    p_logits = torch.log(torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]))
    s = Sampling(temperature=1.0)
    for q in (None, torch.tensor([[0.2, 0.2, 0.6]])):
        counts = Counter()
        for _ in range(4000):
            draft_tok = [2] if q is None else [int(torch.multinomial(q[0], 1, generator=g))]
            n, nxt = verify_sampled(draft_tok, q, p_logits, s, g)
            counts[draft_tok[0] if n == 1 else nxt] += 1
        freq = [counts[i] / 4000 for i in range(3)]
        assert freq == pytest.approx([0.5, 0.3, 0.2], abs=0.03)


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    probs = warp(torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05])), Sampling(1.0, top_p=0.75))
    assert probs.tolist() == pytest.approx([0.625, 0.375, 0.0, 0.0])
