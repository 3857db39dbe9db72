"""The draft's pruned output layer: the right scores, and output that stays the target's.

(A proposal that gives some tokens probability zero is still exact under rejection
sampling: test_engine_sampling's one-hot drafts are the extreme case of it.)
"""

from __future__ import annotations

import random

import pytest
import torch
from torch.nn import functional as F

from lsp_server.engine.draft_head import DraftHead, draft_head
from lsp_server.engine.speculative import EngineOptions, SpeculativeEngine
from lsp_server.kernels.quantize import Int4Linear, keep_dense_for_prefill, linear_weights, quantize_model
from tests.tiny_models import CharTokenizer, tiny_model
from tests.unit.test_engine_greedy import plain_greedy, policy, run

VOCAB, COMMON = 256, 64


def int4_draft(seed: int, keep_dense: bool = True) -> torch.nn.Module:
    model = tiny_model(seed, vocab=VOCAB, hidden=32, layers=1, dtype=torch.float32)
    dense = linear_weights(model)
    quantize_model(model, "int4", group_size=32)
    if keep_dense:
        keep_dense_for_prefill(model, dense)
    return model


@pytest.mark.parametrize("rows", [64, 128, 192])
def test_a_prefix_of_the_int4_kernels_packed_rows_is_a_valid_matrix(rows):
    # draft_head relies on this layout property of torch's CPU int4 packing.
    full = Int4Linear.from_linear(torch.nn.Linear(64, 256, bias=False), 32)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    cut = torch.ops.aten._weight_int4pack_mm_for_cpu(
        x, full.weight[:rows].contiguous(), 32, full.scales_and_zeros[:, :rows].contiguous())
    assert torch.equal(cut, full(x)[:, :rows])


def test_it_scores_the_common_ids_and_the_prompts_ids_and_nothing_else():
    model = int4_draft(1)
    head = draft_head(model, COMMON)
    assert isinstance(head, DraftHead) and head.n_common == COMMON
    full = model.get_output_embeddings()
    prompt = [3, 70, 70, 200, 255, 10]
    head.focus(prompt)
    x = torch.randn(2, 32, dtype=torch.bfloat16)
    logits = head(x)
    assert logits.shape == (2, VOCAB)
    torch.testing.assert_close(logits[:, :COMMON], full(x)[:, :COMMON], rtol=0, atol=0)
    extra = torch.tensor([70, 200, 255])
    torch.testing.assert_close(logits[:, extra], F.linear(x, full.dense[extra]), rtol=0, atol=0)
    scored = set(range(COMMON)) | {70, 200, 255}
    rest = torch.tensor([i for i in range(VOCAB) if i not in scored])
    assert torch.isneginf(logits[:, rest]).all()
    head.include([70, 150])  # tokens the target wrote join the scored set
    assert head(x)[:, 150].isfinite().all() and len(head.extra_ids) == 4
    torch.testing.assert_close(head(x)[:, 150], F.linear(x, full.dense[150:151])[:, 0], rtol=0, atol=0)
    head.focus([1, 2, 100])  # the next request's prompt replaces the extra ids
    assert head(x)[:, 100].isfinite().all() and torch.isneginf(head(x)[:, [150, 200]]).all()


def test_no_pruned_head_where_it_cannot_be_built():
    assert draft_head(tiny_model(1, vocab=VOCAB), COMMON) is None  # a dense head
    assert draft_head(int4_draft(2, keep_dense=False), COMMON) is None  # no dense rows, untied
    assert draft_head(int4_draft(2), VOCAB) is None  # nothing to cut
    assert draft_head(int4_draft(2), 0) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_output_is_still_the_targets_own(seed, k):
    target = tiny_model(seed=1, vocab=VOCAB)
    engine = SpeculativeEngine(target, int4_draft(50 + seed), CharTokenizer(), stop_ids=[],
                               options=EngineOptions(draft_vocab=COMMON))
    assert engine.drafter.head is not None
    prompt = random.Random(seed).choices(range(VOCAB), k=20)
    result = run(engine, prompt, policy(k))
    assert list(result.token_ids) == plain_greedy(target, prompt, 24)
    assert result.stats.drafted > 0
