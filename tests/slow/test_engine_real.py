"""The real default pair: greedy speculative output equals the target's own greedy output.

On the native kernels a verify computes what single steps compute, bit for bit (checked
below on the real target), so the outputs must be equal token for token: no tolerance. Only
where the target runs dense (bf16 or fp32 in torch: no native kernels here), the k-token
verify pass and the one-token step can round differently, so a divergence is allowed only
where the target's top-2 logits are within TIE_TOLERANCE at the divergence point, and the
test checks that margin.
"""

from __future__ import annotations

import pytest
import torch

from lsp_server.backends.local_runtime import load_runtime, native_kernels_run
from lsp_server.bench.engine_bench import TIE_TOLERANCE
from lsp_server.config import Config, ModelConfig
from lsp_server.context.prompt import ContextBudget, build_fim_prompt
from lsp_server.engine.cache import LeanSlot
from lsp_server.engine.types import CompletionRequest, DraftPolicy, StopRule
from lsp_server.engine.lean_step import rows_independent

pytestmark = pytest.mark.slow

PROMPTS = [
    ("def fibonacci(n: int) -> int:\n    ", "\n\nprint(fibonacci(10))\n"),
    ("import os\nimport sys\n\n\ndef list_python_files(root):\n    ", "\n"),
    ("class Point:\n    def __init__(self, x, y, z):\n        self.x = x\n        ", "\n"),
]


@pytest.fixture(scope="module")
def runtime(real_cache):
    return load_runtime(Config(model=ModelConfig()), lambda _: None)  # the server's default weights


def generate(runtime, ids, policy):
    runtime.engine.clear_caches()
    return list(runtime.engine.generate(CompletionRequest("t", tuple(ids), policy)))[-1]


@pytest.mark.parametrize("prefix,suffix", PROMPTS)
def test_greedy_speculation_matches_the_target_token_for_token(runtime, prefix, suffix, monkeypatch):
    # Where the measured round costs say drafting does not pay (an AVX2-only CPU), the adaptive
    # controller would draft nothing: losslessness is checked whatever the cost model says.
    monkeypatch.setattr(runtime.engine, "costs", None)
    ids = build_fim_prompt(prefix, suffix, runtime.encode, runtime.fim, ContextBudget(), "psm").ids
    base = DraftPolicy(context="test", k_init=4, k_max=8, max_new_tokens=40, stop=StopRule("none"),
                       draft_p_min=0.4, mode="adaptive", prompt_lookup=True)
    plain = generate(runtime, ids, DraftPolicy(max_new_tokens=40, stop=StopRule("none"), mode="off"))
    spec = generate(runtime, ids, base)
    assert plain.stats.drafted == 0 and spec.stats.drafted > 0
    assert spec.stats.accepted > 0  # the real draft agrees with the real target often
    a, b = list(spec.token_ids), list(plain.token_ids)
    # Where the native kernels run, `auto` puts the target on them: the exact branch is taken.
    assert rows_independent(runtime.engine.target) or not native_kernels_run()
    if rows_independent(runtime.engine.target):
        assert a == b  # the native kernels: a verify's rows are what single steps compute
    elif a != b:
        n = next(i for i in range(min(len(a), len(b)) + 1) if i == min(len(a), len(b)) or a[i] != b[i])
        with torch.inference_mode():
            logits = runtime.engine.target(input_ids=torch.tensor([ids + b[:n]])).logits[0, -1].float()
        top2 = logits.topk(2).values
        margin = float(top2[0] - top2[1])
        assert margin < TIE_TOLERANCE, f"diverged at token {n} with a top-2 margin of {margin:.3f}"


def test_a_fim_completion_of_a_function_body_is_code(runtime):
    ids = build_fim_prompt("def add(a: int, b: int) -> int:\n    return ", "\n", runtime.encode,
                           runtime.fim, ContextBudget(), "psm").ids
    final = generate(runtime, ids, DraftPolicy(max_new_tokens=16, stop=StopRule("line")))
    assert "a + b" in final.text or "b + a" in final.text


def test_a_verify_on_the_real_target_computes_what_single_steps_compute(runtime):
    target = runtime.engine.target
    if not rows_independent(target):
        pytest.skip("the target runs dense here (no native kernels): verifies may round differently")
    ids = build_fim_prompt(*PROMPTS[1], runtime.encode, runtime.fim, ContextBudget(), "psm").ids
    prompt, tail = ids[:-5], ids[-5:]
    verify, steps = LeanSlot(target), LeanSlot(target)
    with torch.inference_mode():
        verify.feed(prompt)
        steps.feed(prompt)
        together = verify.feed(tail)  # [5, V]: a verify of 4 draft tokens + 1
        one_by_one = torch.cat([steps.feed([t]) for t in tail])
    assert torch.equal(together, one_by_one)


def test_a_sampled_completion_on_the_real_pair_uses_the_draft_and_follows_its_seed(runtime):
    ids = build_fim_prompt(*PROMPTS[1], runtime.encode, runtime.fim, ContextBudget(), "psm").ids
    # Fixed k: an adaptive k starts where earlier requests left the context's memory, and a
    # different k schedule draws the random numbers in another order.
    policy = DraftPolicy(context="test", k_init=4, k_min=4, k_max=4, max_new_tokens=32,
                         stop=StopRule("none"), draft_p_min=0.0, mode="fixed", prompt_lookup=False)

    def sample(seed: int):
        runtime.engine.clear_caches()
        request = CompletionRequest("t", tuple(ids), policy, temperature=0.8, top_p=0.95, seed=seed)
        return list(runtime.engine.generate(request))[-1]

    first, again, other = sample(1), sample(1), sample(2)
    assert first.stats.drafted > 0 and 0 < first.stats.accepted <= first.stats.drafted
    assert first.token_ids == again.token_ids  # the seed decides the sample
    assert first.text.strip() and other.text.strip()
