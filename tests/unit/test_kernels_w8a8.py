"""W8A8 layers on zentorch's int8 kernel: close to the dequantized product at the real
models' shapes, rows independent (a verify computes what single steps compute), and
speculation on such a target reproduces its own greedy output exactly for any k."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from lsp_server.kernels import w8a8
from lsp_server.kernels.quant_fit import dequantize_int8, quantize_int8
from lsp_server.kernels.quantize import quantize_model, quantized_layers
from lsp_server.kernels.w8a8 import W8A8Linear
from tests.tiny_models import CharTokenizer, tiny_model

needs_zentorch = pytest.mark.skipif(not w8a8.w8a8_available(), reason=w8a8.status().why)
pytestmark = needs_zentorch


def _layer(out_features: int, in_features: int, seed: int, bias: bool = False) -> W8A8Linear:
    torch.manual_seed(seed)
    linear = nn.Linear(in_features, out_features, bias=bias).to(torch.bfloat16)
    return W8A8Linear.from_linear(linear)


def test_w8a8_linear_is_its_int8_weight_times_the_input_to_8_bits() -> None:
    torch.manual_seed(2)
    linear = nn.Linear(96, 40, bias=True).to(torch.bfloat16)
    x = torch.randn(3, 96, dtype=torch.bfloat16)
    layer = W8A8Linear.from_linear(linear)
    weight = dequantize_int8(*quantize_int8(linear.weight))
    reference = x.float() @ weight.T + linear.bias.float()

    out = layer(x)

    assert out.shape == (3, 40) and out.dtype == torch.bfloat16
    torch.testing.assert_close(layer.dequantized_weight(), weight)
    # Each row is rounded to int8 steps of peak/127: half a step per input at most, plus
    # the bf16 rounding of the output.
    half_step = x.float().abs().amax(dim=1, keepdim=True) / 254
    bound = half_step * weight.abs().sum(dim=1)[None, :] + 2 ** -7 * reference.abs() + 1e-3
    assert ((out.float() - reference).abs() <= bound).all()


# Every Linear shape of the default pair (out x in; the heads cut to a slice of their rows):
# target q/k/v fused, o, gate/up fused, down; draft likewise; the heads.
REAL_SHAPES = [(2048, 1536), (1536, 1536), (17920, 1536), (1536, 8960),
               (1152, 896), (896, 896), (9728, 896), (896, 4864), (4096, 1536), (4096, 896)]


@pytest.mark.parametrize(("out_features", "in_features"), REAL_SHAPES)
def test_w8a8_is_close_to_its_dequantized_product_and_rows_are_independent_at_real_shapes(
        out_features: int, in_features: int) -> None:
    layer = _layer(out_features, in_features, seed=out_features + in_features)
    assert w8a8.check(layer, rows=(1, 2, 3, 5, 9, 13)) is None


def test_w8a8_rows_do_not_depend_on_the_rows_beside_them_even_beside_outliers() -> None:
    layer = _layer(48, 64, seed=5, bias=True)
    x = torch.randn(5, 64, dtype=torch.bfloat16) * torch.tensor([0.01, 1.0, 50.0, 0.5, 4.0])[:, None].to(torch.bfloat16)
    x[3] = x[3].abs()  # a row with no negative values

    together = layer(x)

    for i in range(5):
        assert torch.equal(together[i], layer(x[i:i + 1])[0])


def test_check_reports_wrong_numbers_and_rows_that_depend_on_their_neighbours() -> None:
    layer = _layer(64, 128, seed=9)
    real = layer.forward
    layer.forward = lambda x: real(x) * 1.5  # type: ignore[method-assign]
    assert "relative error" in w8a8.check(layer)

    def shifted_when_not_alone(x: torch.Tensor) -> torch.Tensor:
        y = real(x)
        if x.shape[0] > 1:
            y = y.clone()
            y[:, 0] += 0.1
        return y

    layer.forward = shifted_when_not_alone  # type: ignore[method-assign]
    assert "differs from it alone" in w8a8.check(layer)


def test_w8a8_state_dict_round_trip() -> None:
    layer = _layer(32, 64, seed=6, bias=True)
    state = layer.state_dict()
    assert {k: (v.dtype, tuple(v.shape)) for k, v in state.items()} == {
        "weight": (torch.int8, (32, 64)), "scales": (torch.float32, (32,)), "bias": (torch.bfloat16, (32,))}
    twin = W8A8Linear(64, 32, bias=True)
    twin.load_state_dict(state, strict=True, assign=True)
    x = torch.randn(2, 64, dtype=torch.bfloat16)
    assert torch.equal(twin(x), layer(x))
    with pytest.raises(RuntimeError, match="weight"):
        W8A8Linear(64, 16, bias=True).load_state_dict(state, strict=True, assign=True)


def test_w8a8_mode_quantizes_every_linear_layer_head_included() -> None:
    model = quantize_model(tiny_model(seed=0), "w8a8")
    kinds = quantized_layers(model)
    assert set(kinds.values()) == {"w8a8"} and "lm_head" in kinds
    assert not [name for name, m in model.named_modules() if type(m) is nn.Linear]


@pytest.mark.parametrize("k", [1, 3, 6, 12])
def test_speculation_reproduces_a_w8a8_targets_own_greedy_output_exactly_for_any_k(k: int) -> None:
    """No near-tie allowance: with rows independent in every layer and attention run one
    query row at a time, a verify of k+1 rows computes exactly what k+1 steps compute."""
    from lsp_server.backends.local_runtime import ready_for_lean_steps
    from lsp_server.engine.speculative import SpeculativeEngine
    from lsp_server.engine.types import CompletionRequest, DraftPolicy, StopRule

    target = quantize_model(tiny_model(seed=1, hidden=64), "w8a8")
    draft = quantize_model(tiny_model(seed=2, hidden=64), "w8a8")
    for model in (target, draft):
        ready_for_lean_steps(model, "test", True, lambda _: None)
    prompt = [5, 17, 9, 3, 25, 42, 7, 8, 9, 10]

    def run(k: int):
        policy = DraftPolicy(context="test", k_init=max(k, 1), k_min=1, k_max=max(k, 1), max_new_tokens=40,
                             stop=StopRule("none"), draft_p_min=0.0, mode="fixed" if k else "off",
                             prompt_lookup=False)
        engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
        return list(engine.generate(CompletionRequest("r", tuple(prompt), policy)))[-1]

    expected = run(0)  # the target alone, one token per step
    final = run(k)
    assert list(final.token_ids) == list(expected.token_ids)
    assert final.stats.drafters["draft"].drafted > 0
    assert max(final.stats.k_trace) == k


def test_lean_verify_logits_equal_single_steps_bit_for_bit() -> None:
    from lsp_server.backends.local_runtime import ready_for_lean_steps
    from lsp_server.engine.cache import LeanSlot

    model = quantize_model(tiny_model(seed=3, hidden=64), "w8a8")
    ready_for_lean_steps(model, "test", True, lambda _: None)
    ids = torch.randint(0, 48, (60,), generator=torch.Generator().manual_seed(1)).tolist()
    steps, verify = LeanSlot(model), LeanSlot(model)
    steps.extend(ids[:40])
    verify.extend(ids[:40])
    one_by_one = torch.cat([steps.feed([t]) for t in ids[40:53]])  # 13 single steps
    together = verify.feed(ids[40:53])  # one verify of 13 rows
    assert torch.equal(together, one_by_one)


def test_without_zentorch_auto_falls_back_and_says_why() -> None:
    """zentorch hidden from a fresh interpreter: `auto` picks the native kernels for a model
    with a GGUF file where they run, else torch int4, and the reason is shown."""
    code = (
        "import sys; sys.modules['zentorch'] = None\n"
        "import torch\n"
        "from lsp_server.backends.local_runtime import kernel_lines, native_kernels_run, resolve_quant\n"
        "print(resolve_quant('auto', 'target', 'cpu', torch.bfloat16))\n"
        "print(resolve_quant('auto', 'target', 'cpu', torch.bfloat16, has_gguf=True))\n"
        "print(native_kernels_run())\n"
        "print(kernel_lines()[-1])\n"
        "from lsp_server.kernels.quantize import quantize_model\n"
        "from tests.tiny_models import tiny_model\n"
        "try:\n"
        "    quantize_model(tiny_model(seed=0), 'w8a8')\n"
        "except ValueError as err:\n"
        "    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    no_gguf, with_gguf, native_runs, kernels, refusal = out.strip().splitlines()
    assert no_gguf == "int4-g32"
    assert with_gguf == ("gguf" if native_runs == "True" else "int4-g32")
    assert ("specfill native" if native_runs == "True" else "torch int4") in kernels
    assert "zentorch does not import" in kernels
    assert "use int4-g32" in refusal


def test_a_cached_w8a8_model_reads_its_weights_from_a_read_only_map_and_can_hand_its_pages_back(tmp_path) -> None:
    from lsp_server.kernels.file_pages import release_cached_pages
    from tests.resident_pages import resident_kb
    from lsp_server.kernels.fuse import fuse_projections
    from lsp_server.kernels.quant_cache import INT8_FILE, apply_quant, quant_dir
    from lsp_server.kernels.quantize import QuantConfig
    from tests.tiny_models import qwen2_for_fusing

    fresh = quantize_model(qwen2_for_fusing(seed=3, dtype=torch.bfloat16), "w8a8")
    first = apply_quant(qwen2_for_fusing(seed=3, dtype=torch.bfloat16), "w8a8", "tiny", root=tmp_path)  # saves
    cached = apply_quant(qwen2_for_fusing(seed=3, dtype=torch.bfloat16), "w8a8", "tiny", root=tmp_path)  # loads
    path = (quant_dir("tiny", QuantConfig("w8a8"), tmp_path) / INT8_FILE).resolve()
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.inference_mode():
        want = fresh(ids).logits
        for model in (first, cached):
            layers = [m for m in model.modules() if isinstance(m, W8A8Linear)]
            assert layers and all(m.weight.data_ptr() % 64 == 0 for m in layers)
            assert all(not m.weight.untyped_storage().resizable() for m in layers)  # a map, not torch's memory
            assert torch.equal(model(ids).logits, want)
    # q, k and v (gate and up) lie back to back in the file: fusing stacks them without a copy.
    assert fuse_projections(cached) > 0
    attn = cached.model.layers[0].self_attn
    assert attn._specfill_qkv.module.weight.data_ptr() == attn.q_proj.weight.data_ptr()
    assert resident_kb(path) > 0
    assert release_cached_pages([tmp_path]) >= path.stat().st_size
    assert resident_kb(path) == 0
    with torch.inference_mode():
        assert torch.equal(cached(ids).logits, want)  # pages read back from the file
