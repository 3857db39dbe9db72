"""The real default pair: the cache verifies, both models load, share a tokenizer and do FIM."""

from __future__ import annotations

import pytest
import torch

from lsp_server.commands.models import default_pair_status
from lsp_server.models.loader import LoadedPair, load_pair
from lsp_server.models.registry import get_model, get_pair
from tests.model_cache import special_tokens_by_text

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cache(real_cache):
    return real_cache


@pytest.fixture(scope="module")
def pair(cache) -> LoadedPair:
    default = get_pair()
    return load_pair(default.target, default.draft, dtype="auto", device="cpu", cache_dir=cache)


def test_every_cached_file_verifies_against_its_sha256(cache):
    for status in default_pair_status(cache, verify=True):
        assert status.hf.state == "verified", (status.spec.name, status.hf.detail)
        assert status.gguf.state in ("verified", "missing"), (status.spec.name, status.gguf.detail)


def test_both_models_load_with_the_pinned_sizes_and_shared_special_tokens(pair):
    default = get_pair()
    assert pair.info.target.parameters == get_model(default.target).parameters
    assert pair.info.draft.parameters == get_model(default.draft).parameters
    assert pair.info.target.vocab_size == pair.info.draft.vocab_size == 151936
    assert pair.special_tokens == special_tokens_by_text(get_model(default.target).tokens)
    assert pair.stop_ids == (151643, 151645)


def greedy_middle(model, tokenizer, prompt: str, steps: int = 8) -> str:
    ids = tokenizer(prompt, return_tensors="pt").input_ids  # [1, T]
    with torch.inference_mode():
        out = model.generate(ids, max_new_tokens=steps, do_sample=False, eos_token_id=[151643, 151645])
    return tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)


def test_both_models_fill_an_obvious_middle(pair):
    prompt = "<|fim_prefix|>def add(a, b):\n    return <|fim_suffix|>\n\n\nprint(add(1, 2))\n<|fim_middle|>"
    for model in (pair.target, pair.draft):
        assert greedy_middle(model, pair.tokenizer, prompt).strip().startswith("a + b")
