"""The real pair with a quantized target: w8a8 (int8 x int8 on zentorch, the CPU default),
whose rows are computed independently, so speculation reproduces the target's plain greedy
output exactly; and int4 (`model.quant=int4-g32`, the fallback without zentorch), which reads
prompts with its bf16 weights and writes tokens with the int4 ones, where speculation
reproduces the plain output up to near-ties where kernels round differently."""

from __future__ import annotations

import pytest
import torch

from lsp_server.backends.local_runtime import load_runtime
from lsp_server.bench.engine_bench import TIE_TOLERANCE
from lsp_server.config import Config, ModelConfig
from lsp_server.context.prompt import ContextBudget, build_fim_prompt
from lsp_server.engine.lean_step import rows_independent
from lsp_server.engine.types import DraftPolicy, StopRule
from lsp_server.kernels import native
from lsp_server.kernels.gguf import GGUFLinear
from lsp_server.kernels.quantize import Int4Linear
from lsp_server.models.loader import cpu_supports_bf16
from lsp_server.kernels.w8a8 import W8A8Linear, w8a8_available
from tests.slow.test_engine_real import PROMPTS, generate

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=[
    pytest.param("w8a8", marks=pytest.mark.skipif(not w8a8_available(), reason="no zentorch kernel here")),
    pytest.param("gguf", marks=pytest.mark.skipif(not native.available(), reason=native.why_unavailable())),
    pytest.param("int4-g32", marks=pytest.mark.skipif(
        not cpu_supports_bf16(), reason="torch's int4 kernel needs bf16 activations, emulated (minutes) on this CPU"))])
def runtime(real_cache, request):
    return load_runtime(Config(model=ModelConfig(quant=request.param, draftQuant=request.param)), lambda _: None)


def test_the_quantized_layers_are_what_the_mode_says(runtime):
    target = runtime.engine.target
    native_layers = [m for m in target.modules() if isinstance(m, GGUFLinear)]
    if native_layers:
        assert len(native_layers) == 7 * 28 + 1 and rows_independent(target)
        assert {m.type_id for m in native_layers} == {12, 14}  # Q4_K and Q6_K, as in the file
    elif target.quant_config.mode == "w8a8":
        w8a8 = [m for m in target.modules() if isinstance(m, W8A8Linear)]
        assert len(w8a8) == 7 * 28 + 1  # q, k, v, o, gate, up, down per layer, and the head
        assert rows_independent(target) and not [m for m in target.modules() if isinstance(m, Int4Linear)]
    else:
        layers = [m for m in target.modules() if isinstance(m, Int4Linear)]
        assert layers and all(m.dense is not None and m.dense.dtype == torch.bfloat16 for m in layers)
    assert 1 <= runtime.engine.options.max_k <= 12


@pytest.mark.parametrize("prefix,suffix", PROMPTS[:2])
def test_speculation_over_the_quantized_target_matches_its_plain_output(runtime, prefix, suffix, monkeypatch):
    # Where the measured round costs say drafting does not pay (the native kernels on an
    # AVX-512 CPU, where zentorch is the default), the adaptive controller drafts nothing:
    # exactness is checked whatever the cost model says.
    monkeypatch.setattr(runtime.engine, "costs", None)
    ids = build_fim_prompt(prefix, suffix, runtime.encode, runtime.fim, ContextBudget(), "psm").ids
    plain = generate(runtime, ids, DraftPolicy(max_new_tokens=40, stop=StopRule("none"), mode="off"))
    k_max = max(1, runtime.engine.options.max_k)
    spec = generate(runtime, ids, DraftPolicy(context="test", k_init=min(4, k_max), k_max=k_max,
                                              max_new_tokens=40, stop=StopRule("none"), draft_p_min=0.4,
                                              mode="adaptive"))
    assert spec.stats.accepted > 0
    a, b = list(spec.token_ids), list(plain.token_ids)
    if rows_independent(runtime.engine.target):
        assert a == b  # exact: no near-tie allowance where every row is computed on its own
        return
    if a != b:
        n = next(i for i in range(min(len(a), len(b)) + 1) if i == min(len(a), len(b)) or a[i] != b[i])
        # The step that picked b[n] ran on the quantized kernels: score it the same way.
        runtime.engine.clear_caches()
        slot = runtime.engine.pool.acquire(ids + b[:n])
        with torch.inference_mode():
            slot.extend((ids + b[:n])[:-1])
            logits = slot.feed([(ids + b[:n])[-1]])[-1].float()
        top2 = logits.topk(2).values
        margin = float(top2[0] - top2[1])
        assert margin < TIE_TOLERANCE, f"diverged at token {n} with a top-2 margin of {margin:.3f}"
