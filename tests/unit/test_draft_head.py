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
from lsp_server.kernels import native
from lsp_server.kernels.gguf import load_gguf_model
from tests.tiny_models import CharTokenizer, qwen2_for_fusing, tiny_model
from tests.unit.test_engine_greedy import plain_greedy, policy, run
from tests.unit.test_kernels_gguf import write_gguf

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.why_unavailable()}")

VOCAB, COMMON = 256, 64


@pytest.fixture(scope="module")
def gguf_draft_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("draft")
    model = qwen2_for_fusing(3)
    model.config.save_pretrained(root)
    write_gguf(model, root / "model.gguf")
    return root


def gguf_draft(directory):
    return load_gguf_model(directory, directory / "model.gguf")


def test_it_scores_the_common_ids_and_the_prompts_ids_and_nothing_else(gguf_draft_dir):
    model = gguf_draft(gguf_draft_dir)
    head = draft_head(model, COMMON)
    assert isinstance(head, DraftHead) and head.n_common == COMMON
    full = model.get_output_embeddings()
    rows = full.dequantized_weight()  # [V, H]
    prompt = [3, 70, 70, 200, 255, 10]
    head.focus(prompt)
    x = torch.randn(2, 128)
    logits = head(x)
    assert logits.shape == (2, VOCAB)
    assert torch.equal(logits[:, :COMMON], full(x)[:, :COMMON])  # the same kernel on a prefix of rows
    extra = torch.tensor([70, 200, 255])
    torch.testing.assert_close(logits[:, extra], F.linear(x, rows[extra]), rtol=0, atol=0)
    scored = set(range(COMMON)) | {70, 200, 255}
    rest = torch.tensor([i for i in range(VOCAB) if i not in scored])
    assert torch.isneginf(logits[:, rest]).all()
    head.include([70, 150])  # tokens the target wrote join the scored set
    assert head(x)[:, 150].isfinite().all() and len(head.extra_ids) == 4
    # Against the same product over the same rows: torch's fp32 GEMM may round a 1-row
    # product differently from a 4-row one (seen on an AMD EPYC with AVX-512).
    torch.testing.assert_close(head(x)[:, head.extra_ids], F.linear(x, rows[head.extra_ids]), rtol=0, atol=0)
    head.focus([1, 2, 100])  # the next request's prompt replaces the extra ids
    assert head(x)[:, 100].isfinite().all() and torch.isneginf(head(x)[:, [150, 200]]).all()


def test_no_pruned_head_where_it_cannot_be_built(gguf_draft_dir):
    assert draft_head(tiny_model(1, vocab=VOCAB), COMMON) is None  # a dense head
    assert draft_head(gguf_draft(gguf_draft_dir), VOCAB) is None  # nothing to cut
    assert draft_head(gguf_draft(gguf_draft_dir), 0) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_output_is_still_the_targets_own(gguf_draft_dir, seed, k):
    target = tiny_model(seed=1, vocab=VOCAB, hidden=128)
    engine = SpeculativeEngine(target, gguf_draft(gguf_draft_dir), CharTokenizer(), stop_ids=[],
                               options=EngineOptions(draft_vocab=COMMON))
    assert engine.drafter.head is not None
    prompt = random.Random(seed).choices(range(VOCAB), k=20)
    result = run(engine, prompt, policy(k))
    assert list(result.token_ids) == plain_greedy(target, prompt, 24)
    assert result.stats.drafted > 0
