"""Weight-only int8 / int4 Linear layers, whole-model quantization and the on-disk cache."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from lsp_server.kernels import quant_cache
from lsp_server.kernels.lm_head import flatten_head_input
from lsp_server.kernels.quant_cache import apply_quant, load_quantized, quant_dir, save_quantized
from lsp_server.kernels.quant_fit import dequantize_int4, dequantize_int8, quantize_int4, quantize_int8, relative_error
from lsp_server.kernels.quantize import (
    Int4Linear,
    Int8Linear,
    QuantConfig,
    keep_dense_for_prefill,
    linear_weights,
    quantize_model,
    quantized_layers,
    weight_bytes,
)
from lsp_server.kernels.w8a8 import W8A8Linear, w8a8_available
from lsp_server.kernels.w8a8 import status as w8a8_status

# The kernels accumulate in fp32 and round the output (and the bias add) to bf16, whose
# relative precision is 2**-8: allow twice that against the largest output.
BF16_OUTPUT_RTOL = 2.0**-7
# Logit gap under which two kernels may legitimately pick different greedy tokens.
NEAR_TIE = 0.05


def tiny_model(seed: int = 0, tie: bool = False) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=tie)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16).eval()
    # Default init leaves tiny logits and many near-ties; larger weights give clear winners.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.08)
    return model


def dequantized_twin(quantized: nn.Module, original: nn.Module) -> nn.Module:
    """`original` with each quantized layer's weight replaced by what the kernel computes with."""
    twin = copy.deepcopy(original).float()
    with torch.no_grad():
        for name in quantized_layers(quantized):
            twin.get_submodule(name).weight.copy_(quantized.get_submodule(name).dequantized_weight())
    return twin


def greedy(model: nn.Module, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    out = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False, min_new_tokens=new_tokens,
                         pad_token_id=0)
    return out[0, prompt.shape[1]:]


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_int4_linear_matches_dequantized_matmul(group_size: int) -> None:
    torch.manual_seed(1)
    linear = nn.Linear(256, 48, bias=True).to(torch.bfloat16)
    x = torch.randn(2, 5, 256, dtype=torch.bfloat16)
    codes, scales_and_zeros = quantize_int4(linear.weight, group_size)
    reference = x.float() @ dequantize_int4(codes, scales_and_zeros, group_size).T + linear.bias.float()

    out = Int4Linear.from_linear(linear, group_size)(x)

    assert out.shape == (2, 5, 48) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference, rtol=0, atol=BF16_OUTPUT_RTOL * reference.abs().max().item())


def test_int8_linear_matches_dequantized_matmul() -> None:
    torch.manual_seed(2)
    linear = nn.Linear(96, 40, bias=True).to(torch.bfloat16)
    x = torch.randn(3, 96, dtype=torch.bfloat16)
    reference = x.float() @ dequantize_int8(*quantize_int8(linear.weight)).T + linear.bias.float()

    out = Int8Linear.from_linear(linear)(x)

    assert out.shape == (3, 40) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference, rtol=0, atol=BF16_OUTPUT_RTOL * reference.abs().max().item())


@pytest.mark.parametrize(("mode", "max_relative_error"), [("int8", 0.01), ("int4", 0.10)])
def test_quantized_weights_stay_close_to_the_original(mode: str, max_relative_error: float) -> None:
    torch.manual_seed(3)
    weight = torch.randn(64, 256) * torch.linspace(0.1, 3.0, 64)[:, None]  # rows of different scale
    if mode == "int8":
        restored = dequantize_int8(*quantize_int8(weight))
    else:
        restored = dequantize_int4(*quantize_int4(weight, 32), 32)
    assert ((restored - weight).norm() / weight.norm()).item() < max_relative_error


def test_int4_codes_use_the_whole_range_and_keep_group_extremes() -> None:
    weight = torch.randn(16, 64)
    codes, scales_and_zeros = quantize_int4(weight, 32)
    restored = dequantize_int4(codes, scales_and_zeros, 32)
    assert codes.min().item() == 0 and codes.max().item() == 15
    groups, restored_groups = weight.reshape(16, 2, 32), restored.reshape(16, 2, 32)
    step = scales_and_zeros.float().transpose(0, 1)[..., 0]  # [N, G]
    assert ((restored_groups.amax(-1) - groups.amax(-1)).abs() <= step).all()
    assert ((restored_groups.amin(-1) - groups.amin(-1)).abs() <= step).all()


@pytest.mark.parametrize(("mode", "group_size"), [("int8", 64), ("int4", 32), ("int4", 64)])
def test_quantized_model_generates_like_its_dequantized_twin(mode: str, group_size: int) -> None:
    original = tiny_model()
    quantized = quantize_model(copy.deepcopy(original), mode, group_size)  # type: ignore[arg-type]
    reference = dequantized_twin(quantized, original)
    prompt = torch.tensor([[5, 17, 99, 3, 250, 42, 7, 8]])

    tokens = greedy(quantized, prompt, 16)

    # Teacher-force the quantized model's choices through the fp32 twin: each must be the
    # twin's argmax, or within a near-tie of it (bf16 vs fp32 activations round differently).
    with torch.no_grad():
        logits = reference(torch.cat([prompt, tokens[None]], dim=1)).logits[0, prompt.shape[1] - 1:-1]  # [16, V]
    chosen = logits.gather(1, tokens[:, None])[:, 0]
    assert (logits.amax(dim=1) - chosen <= NEAR_TIE).all()
    assert (logits.argmax(dim=1) == tokens).float().mean().item() >= 0.9


def on_grid_weight(rows: int, cols: int, levels: int = 15, group_size: int = 32) -> torch.Tensor:
    """Weights as a 4-bit GGUF stores them: per group, scale * q - offset with q in 0..levels."""
    torch.manual_seed(4)
    groups = rows * cols // group_size
    q = torch.randint(0, levels + 1, (groups, group_size)).float()
    q[:, 0], q[:, 1] = 0, levels  # each group spans exactly `levels` steps
    scale, offset = torch.rand(groups, 1) * 0.01 + 0.001, torch.rand(groups, 1) * 0.05
    return (q * scale - offset).reshape(rows, cols).to(torch.bfloat16)


@pytest.mark.parametrize("levels", [15, 14, 13])
def test_int4_recovers_weights_that_already_lie_on_a_4_bit_grid(levels: int) -> None:
    weight = on_grid_weight(64, 256, levels)
    minmax_error = relative_error(weight, dequantize_int4(*quantize_int4_minmax(weight, 32), 32))
    error = relative_error(weight, dequantize_int4(*quantize_int4(weight, 32), 32))
    # Only the bf16 rounding of scale and zero remains (~0.2%); plain min/max misses
    # grids that don't span all 16 codes.
    assert error < 0.004
    assert levels == 15 or minmax_error > 5 * error


def quantize_int4_minmax(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The textbook int4 quantizer: the group's min and max become codes 0 and 15."""
    n, k = weight.shape
    w = weight.float().reshape(n, k // group_size, group_size)
    lo, hi = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    s = ((hi - lo) / 15).to(torch.bfloat16).float()
    z = (lo + 8 * s).to(torch.bfloat16).float()
    codes = (torch.round((w - z) / s) + 8).clamp(0, 15).to(torch.int32).reshape(n, k)
    return codes, torch.cat([s, z], dim=-1).transpose(0, 1).to(torch.bfloat16).contiguous()


def test_int4_fit_is_no_worse_than_min_max_on_ordinary_weights() -> None:
    torch.manual_seed(5)
    weight = torch.randn(128, 512)
    minmax_error = relative_error(weight, dequantize_int4(*quantize_int4_minmax(weight, 32), 32))
    assert relative_error(weight, dequantize_int4(*quantize_int4(weight, 32), 32)) <= minmax_error


def test_mixed_mode_keeps_int4_only_where_the_weights_fit_4_bits() -> None:
    model = nn.Sequential(nn.Linear(256, 64), nn.Linear(256, 64))
    with torch.no_grad():
        model[0].weight.copy_(on_grid_weight(64, 256))
        model[1].weight.normal_()
    quantize_model(model, "mixed", 32)
    assert [type(m) for m in model] == [Int4Linear, Int8Linear]


def test_quantize_model_replaces_every_linear_including_lm_head() -> None:
    model = quantize_model(tiny_model(), "int4", 32)
    assert not [name for name, m in model.named_modules() if type(m) is nn.Linear]
    assert isinstance(model.lm_head, Int4Linear)
    assert model.get_input_embeddings().weight.dtype == torch.bfloat16


def test_lm_head_can_stay_bf16() -> None:
    model = quantize_model(tiny_model(), "int8", include_lm_head=False)
    assert type(model.lm_head) is nn.Linear
    assert isinstance(model.model.layers[0].mlp.down_proj, Int8Linear)


def test_tied_lm_head_is_left_tied() -> None:
    model = quantize_model(tiny_model(tie=True), "int8")
    assert model.lm_head.weight is model.get_input_embeddings().weight


def test_layers_the_int4_kernel_refuses_fall_back_to_int8() -> None:
    model = nn.Sequential(nn.Linear(64, 8), nn.Linear(8, 32), nn.Linear(64, 32))  # N=8; K=8 < group
    quantize_model(model, "int4", 32)
    assert [type(m) for m in model] == [Int8Linear, Int8Linear, Int4Linear]


def test_quantization_cuts_bytes_read_per_token() -> None:
    modes = ("bf16", "int8", "int4", "w8a8") if w8a8_available() else ("bf16", "int8", "int4")
    sizes = {mode: weight_bytes(quantize_model(tiny_model(), mode, 32))["read_per_token"]  # type: ignore[arg-type]
             for mode in modes}
    assert sizes["int4"] < sizes["int8"] < sizes["bf16"]
    assert sizes.get("w8a8", sizes["int8"]) >= sizes["int8"]


@pytest.mark.parametrize(("text", "expected"), [
    ("bf16", QuantConfig("bf16")), ("int8", QuantConfig("int8")), ("int4", QuantConfig("int4", 32)),
    ("int4-g128", QuantConfig("int4", 128)), ("mixed-g64-nohead", QuantConfig("mixed", 64, False))])
def test_quant_config_parses_its_own_tags(text: str, expected: QuantConfig) -> None:
    assert QuantConfig.parse(text) == expected
    assert QuantConfig.parse(expected.tag) == expected


@pytest.mark.parametrize("text", ["int3", "int4-g48", "int4-gx", ""])
def test_bad_quant_tags_say_what_is_allowed(text: str) -> None:
    with pytest.raises(ValueError, match="use bf16, int8, int4"):
        QuantConfig.parse(text)


def test_unknown_mode_and_group_size_are_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        QuantConfig("int3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group size"):
        QuantConfig("int4", group_size=48)


def tiny_model_with_grid_layer() -> Qwen2ForCausalLM:
    """A tiny model whose first gate projection lies on a 4-bit grid, like a Q4_K tensor."""
    model = tiny_model()
    with torch.no_grad():
        gate = model.model.layers[0].mlp.gate_proj.weight
        gate.copy_(on_grid_weight(*gate.shape))
    return model


def logits_of(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([[1, 2, 3, 4, 200, 100]])).logits


@pytest.mark.parametrize(("mode", "group_size"), [
    ("int8", 64), ("int4", 32), ("mixed", 32),
    pytest.param("w8a8", 32, marks=pytest.mark.skipif(not w8a8_available(), reason=w8a8_status().why))])
def test_cached_weights_load_without_requantizing_and_give_identical_outputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, group_size: int) -> None:
    first = apply_quant(tiny_model_with_grid_layer(), mode, "tiny", group_size, root=tmp_path)  # type: ignore[arg-type]
    assert (quant_dir("tiny", first.quant_config, tmp_path) / "quant.json").exists()
    if mode == "mixed":
        assert set(quantized_layers(first).values()) == {"int4", "int8"}

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("quantized again instead of loading the cache")

    monkeypatch.setattr(quant_cache, "quantize_model", refuse)
    second = apply_quant(tiny_model_with_grid_layer(), mode, "tiny", group_size, root=tmp_path)  # type: ignore[arg-type]

    assert quantized_layers(second) == quantized_layers(first)
    assert torch.equal(logits_of(second), logits_of(first))


def test_cache_root_follows_specfill_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECFILL_CACHE", str(tmp_path))
    apply_quant(tiny_model(), "int8", "tiny")
    assert (tmp_path / "tiny" / "quant" / "int8" / "weights.safetensors").exists()


@pytest.mark.parametrize("field", ["torch_version", "cpu_capability", "group_size"])
def test_a_cache_from_another_setup_is_rebuilt(tmp_path: Path, field: str) -> None:
    model = apply_quant(tiny_model(), "int4", "tiny", 32, root=tmp_path)
    meta_path = quant_dir("tiny", model.quant_config, tmp_path) / "quant.json"
    meta = json.loads(meta_path.read_text())
    meta[field] = 999 if field == "group_size" else "something else"
    meta_path.write_text(json.dumps(meta))

    rebuilt = apply_quant(tiny_model(), "int4", "tiny", 32, root=tmp_path)

    assert json.loads(meta_path.read_text())[field] != meta[field]
    assert torch.equal(logits_of(rebuilt), logits_of(model))


def test_a_cache_of_another_model_under_the_same_key_is_rebuilt(tmp_path: Path) -> None:
    apply_quant(tiny_model(seed=0), "int8", "tiny", root=tmp_path)
    other = apply_quant(tiny_model(seed=1), "int8", "tiny", root=tmp_path)
    assert torch.equal(logits_of(other), logits_of(quantize_model(tiny_model(seed=1), "int8")))


def test_a_cache_that_does_not_fit_leaves_the_model_untouched(tmp_path: Path) -> None:
    quantized = quantize_model(tiny_model(), "int8")
    directory = save_quantized(quantized, tmp_path / "q", fingerprint="x")
    other = Qwen2ForCausalLM(Qwen2Config(vocab_size=256, hidden_size=32, intermediate_size=64,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         tie_word_embeddings=False))
    with pytest.raises(ValueError, match="does not fit"):
        load_quantized(other, directory)
    assert not quantized_layers(other)


def test_local_models_get_a_stable_cache_key_of_their_own(tmp_path: Path) -> None:
    from lsp_server.kernels.quant_cache import quant_cache_key

    assert quant_cache_key("qwen2.5-coder-1.5b") == "qwen2.5-coder-1.5b"
    local = quant_cache_key(str(tmp_path / "my-model"))
    assert local.startswith("local/my-model-") and local == quant_cache_key(str(tmp_path / "my-model"))
    assert local != quant_cache_key(str(tmp_path / "other" / "my-model"))


def test_quantize_for_takes_a_config_tag_and_caches_under_the_model_key(tmp_path: Path) -> None:
    from lsp_server.kernels.quant_cache import quantize_for

    model = quantize_for(tiny_model(), "int4-g64-nohead", "qwen2.5-coder-0.5b", cache_dir=tmp_path)
    assert model.quant_config == QuantConfig("int4", 64, include_lm_head=False)
    assert (tmp_path / "qwen2.5-coder-0.5b" / "quant" / "int4-g64-nohead" / "quant.json").exists()


def test_quantizing_a_quantized_model_again_is_refused(tmp_path: Path) -> None:
    model = apply_quant(tiny_model(), "int8", "tiny", root=tmp_path)
    with pytest.raises(ValueError, match="quantized already"):
        apply_quant(model, "int4", "tiny", 32, root=tmp_path)


def test_no_temp_directories_are_left_behind(tmp_path: Path) -> None:
    orphan = tmp_path / "tiny" / "quant" / ".int8.999999999.tmp"  # a pid that cannot exist
    orphan.mkdir(parents=True)
    apply_quant(tiny_model(), "int8", "tiny", root=tmp_path)
    apply_quant(tiny_model(seed=1), "int8", "tiny", root=tmp_path)  # overwrites the stale cache
    assert sorted(p.name for p in (tmp_path / "tiny" / "quant").iterdir()) == ["int8"]


def test_dense_weights_run_prefills_and_the_int4_kernel_runs_decode_steps() -> None:
    original = tiny_model()
    weights = {name: m.weight.detach().clone() for name, m in original.named_modules() if type(m) is nn.Linear}
    model = quantize_model(copy.deepcopy(original), "int4", 32)
    dense_weights = linear_weights(original)
    assert keep_dense_for_prefill(model, dense_weights, min_rows=4) == len(quantized_layers(model))
    layer = model.model.layers[0].mlp.up_proj
    few, many = torch.randn(1, 3, 64, dtype=torch.bfloat16), torch.randn(1, 4, 64, dtype=torch.bfloat16)
    # Below min_rows: the int4 kernel, i.e. its dequantized weight; from min_rows: bf16 weights.
    torch.testing.assert_close(layer(few).float(), few.float() @ layer.dequantized_weight().T,
                               rtol=BF16_OUTPUT_RTOL, atol=BF16_OUTPUT_RTOL * 4)
    torch.testing.assert_close(layer(many), nn.functional.linear(many, weights["model.layers.0.mlp.up_proj"]))
    assert layer(many).shape == (1, 4, 128)
    # The dense weights are no buffers: the on-disk quantized cache never stores them.
    assert not any("dense" in key for key in model.state_dict())


def test_a_draft_prefilled_on_dense_weights_leaves_speculative_output_lossless() -> None:
    from lsp_server.engine.speculative import SpeculativeEngine
    from lsp_server.engine.types import CompletionRequest, DraftPolicy, StopRule
    from tests.tiny_models import CharTokenizer

    # An fp32 target: its k-row verify and 1-row steps round alike, so equality is exact.
    target, original = tiny_model(seed=1).float(), tiny_model(seed=2)
    draft = quantize_model(copy.deepcopy(original), "int4", 32)
    keep_dense_for_prefill(draft, linear_weights(original), min_rows=4)
    prompt = [5, 17, 99, 3, 250, 42, 7, 8, 9, 10]
    policy = DraftPolicy(context="test", k_init=3, k_min=1, k_max=3, max_new_tokens=20,
                         stop=StopRule("none"), draft_p_min=0.0, mode="fixed", prompt_lookup=False)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    final = list(engine.generate(CompletionRequest("r", tuple(prompt), policy)))[-1]
    with torch.inference_mode():
        expected = greedy(target, torch.tensor([prompt]), 20).tolist()
    assert list(final.token_ids) == expected
    assert final.stats.drafters["draft"].drafted > 0


def test_flattened_head_input_gives_the_same_logits_in_every_shape() -> None:
    model = tiny_model()
    prompt = torch.tensor([[5, 17, 99, 3, 250, 42, 7, 8]])
    with torch.inference_mode():
        before_all = model(prompt).logits
        before_last = model(prompt, logits_to_keep=1).logits
        assert flatten_head_input(model) and flatten_head_input(model)  # idempotent
        assert len(model.lm_head._forward_pre_hooks) == 1
        after_all = model(prompt).logits
        after_last = model(prompt, logits_to_keep=1).logits
    assert after_all.shape == before_all.shape == (1, 8, 256)
    assert after_last.shape == before_last.shape == (1, 1, 256)
    torch.testing.assert_close(after_all, before_all)
    torch.testing.assert_close(after_last, before_last)
