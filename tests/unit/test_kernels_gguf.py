"""A model run straight from a GGUF file's blocks on the native kernels: the file's tensors
become its layers (nothing dequantized at load), its outputs follow the dequantized weights,
a verify computes what single steps compute bit for bit, and greedy speculation between two
such models reproduces the target's own greedy output exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from lsp_server.engine.cache import Aborted, LeanSlot
from lsp_server.engine import native_layers
from lsp_server.engine.draft_head import draft_head
from lsp_server.engine.lean_step import ROWS_INDEPENDENT, StaticKV, lean_forward
from lsp_server.engine.speculative import SpeculativeEngine
from lsp_server.engine.types import CompletionRequest, DraftPolicy, StopRule
from lsp_server.kernels import native
from lsp_server.kernels.fuse import fuse_projections
from lsp_server.kernels.lm_head import head_pieces
from lsp_server.kernels.gguf import (GGUFEmbedding, GGUFLinear, UnsupportedTensor, gguf_name, load_gguf_model,
                                     requantize_to_q4_0)
from tests.tiny_models import CharTokenizer, qwen2_for_fusing

pytestmark = pytest.mark.skipif(not native.available(), reason=f"native kernels: {native.why_unavailable()}")

Q8_0, Q5_0, Q4_0 = 8, 6, 2


def write_gguf(model: torch.nn.Module, path: Path, types: dict[str, int] | None = None) -> None:
    """`model`'s weights as a GGUF file: matrices in Q8_0 (or `types[gguf name]`), the rest F32."""
    import gguf

    writer = gguf.GGUFWriter(path, "qwen2")
    for name, tensor in model.state_dict().items():
        module, _, kind = name.rpartition(".")
        target = f"{gguf_name(module)}.{kind}"
        values = tensor.float().numpy()
        qtype = (types or {}).get(target, Q8_0) if values.ndim == 2 else 0
        if qtype == 0:
            writer.add_tensor(target, values.astype(np.float32))
        else:
            ggml = gguf.GGMLQuantizationType(qtype)
            writer.add_tensor(target, gguf.quants.quantize(values, ggml), raw_dtype=ggml)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def dequantized_twin(model: torch.nn.Module, path: Path) -> torch.nn.Module:
    """`model` with each weight replaced by what the GGUF file holds, dequantized."""
    import gguf

    reader = gguf.GGUFReader(path)
    values = {t.name: gguf.quants.dequantize(t.data, t.tensor_type) for t in reader.tensors}
    state = {}
    for name, tensor in model.state_dict().items():
        module, _, kind = name.rpartition(".")
        state[name] = torch.from_numpy(np.ascontiguousarray(values[f"{gguf_name(module)}.{kind}"])).reshape(tensor.shape)
    twin = type(model)(model.config).eval()
    twin.load_state_dict(state)
    return twin


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    made = {}
    for role, seed, types in (("target", 0, {"blk.0.attn_v.weight": Q5_0, "blk.1.ffn_down.weight": Q5_0,
                                                  "blk.1.attn_output.weight": Q4_0}),
                              ("draft", 7, None)):
        model = qwen2_for_fusing(seed)
        model.config.save_pretrained(root / role)
        write_gguf(model, root / role / "model.gguf", types)
        made[role] = (model, root / role)
    return made


def load(files, role: str) -> torch.nn.Module:
    _, directory = files[role]
    return load_gguf_model(directory, directory / "model.gguf")


def test_every_matrix_stays_in_its_blocks_and_norms_and_biases_are_the_files_floats(files):
    model = load(files, "target")
    linears = [m for m in model.modules() if isinstance(m, GGUFLinear)]
    assert len(linears) == 2 * 7 + 1
    assert {m.type_id for m in linears} == {Q8_0, Q5_0, Q4_0}
    assert model.model.layers[0].self_attn.v_proj.type_id == Q5_0
    assert isinstance(model.model.embed_tokens, GGUFEmbedding)
    assert all(p.dtype == torch.float32 and not p.is_meta for p in model.parameters())
    reference, _ = files["target"]
    assert torch.equal(model.model.norm.weight, reference.model.norm.weight.float())
    assert torch.equal(model.model.layers[1].self_attn.q_proj.bias, reference.model.layers[1].self_attn.q_proj.bias)


def test_outputs_follow_the_dequantized_weights(files, tmp_path):
    model = load(files, "target")
    twin = dequantized_twin(files["target"][0], files["target"][1] / "model.gguf")
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        got, want = model(input_ids=ids).logits, twin(input_ids=ids).logits
    error = float((got - want).norm() / want.norm())
    assert error < 0.02, error  # activations rounded to int8 per block: ~0.5 % measured


def test_steps_in_the_native_library_follow_the_dequantized_weights(files):
    model = load(files, "target")
    fuse_projections(model)
    setattr(model, ROWS_INDEPENDENT, True)
    assert native_layers.fit(model)  # norms, attention and SiLU of steps run in the library
    assert not native_layers.fit(files["target"][0])  # a torch model's layers: never
    twin = dequantized_twin(files["target"][0], files["target"][1] / "model.gguf")
    seq = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(6)).tolist()
    slot = LeanSlot(model)
    with torch.inference_mode():
        slot.feed(seq[:30])  # a prompt: the torch path
        got = torch.cat([slot.feed(seq[i:i + 1]) for i in range(30, 40)])  # steps: the library
        want = twin(input_ids=torch.tensor([seq])).logits[0, 30:40]
    error = float((got - want).norm() / want.norm())
    assert error < 0.02, error


def test_a_verify_equals_single_steps_bit_for_bit(files):
    model = load(files, "target")
    fuse_projections(model)
    setattr(model, ROWS_INDEPENDENT, True)
    assert native_layers.fit(model)
    seq = torch.randint(0, 256, (60,), generator=torch.Generator().manual_seed(1)).tolist()
    verify, steps = LeanSlot(model), LeanSlot(model)
    with torch.inference_mode():
        verify.feed(seq[:50])
        steps.feed(seq[:50])
        together = verify.feed(seq[50:60])  # [10, V]
        alone = torch.cat([steps.feed(seq[i:i + 1]) for i in range(50, 60)])
    assert torch.equal(together, alone)


def _layer_by_calls(layer, x, keys, values, past, cos, sin):
    """A decoder layer as separate library calls composed in torch (what the one-call layer
    step replaced): the reference it must equal bit for bit."""
    attn, mlp = layer.self_attn, layer.mlp
    norm = lambda module, rows: native.rmsnorm(rows.contiguous(), module.weight, module.variance_epsilon,
                                               torch.empty_like(rows))
    h = norm(layer.input_layernorm, x)
    fused = getattr(attn, "_specfill_qkv", None)
    q, k, v = fused(h) if fused else (attn.q_proj(h), attn.k_proj(h), attn.v_proj(h))
    if fused is None:  # the library takes k and v as row views of one stride
        q, k, v = torch.cat([q, k, v], dim=1).split([q.shape[1], k.shape[1], v.shape[1]], dim=1)
    out = native.attention(q, k, v, cos, sin, keys, values, past, attn.scaling, torch.empty(x.shape[0], q.shape[1]))
    x = x + attn.o_proj(out)
    h = norm(layer.post_attention_layernorm, x)
    fused = getattr(mlp, "_specfill_gate_up", None)
    gate_up = fused.module(h) if fused else torch.cat([mlp.gate_proj(h), mlp.up_proj(h)], dim=1)
    return x + mlp.down_proj(native.silu_mul(gate_up, torch.empty(x.shape[0], mlp.down_proj.in_features)))


RUNNABLE = [v for v in native.VARIANTS if native.available() and v in native.variants_supported()]


@pytest.mark.parametrize("variant", RUNNABLE)
def test_the_one_call_layer_step_equals_the_layers_calls_one_by_one_bit_for_bit(files, variant):
    from lsp_server.engine.lean_step import StaticKV, _rope_table

    model = load(files, "target")
    fuse_projections(model)
    config = model.config
    # the tiny target keeps layer 0's v in Q5_0 (q|k|v in three parts) and fuses layer 1's
    assert getattr(model.model.layers[0].self_attn, "_specfill_qkv", None) is None
    assert getattr(model.model.layers[1].self_attn, "_specfill_qkv", None) is not None
    before = native.variant()
    native.set_variant(variant)
    try:
        for rows, past in ((1, 0), (1, 9), (5, 12)):
            kv, reference = StaticKV(model), StaticKV(model)
            for cache in (kv, reference):
                cache.reserve(past + rows)
                gen = torch.Generator().manual_seed(past)
                cache.keys.copy_(torch.randn(cache.keys.shape, generator=gen))
                cache.values.copy_(torch.randn(cache.values.shape, generator=gen))
            cos, sin = (t[past:past + rows] for t in _rope_table(model, past + rows, torch.float32))
            x = torch.randn(rows, config.hidden_size, generator=torch.Generator().manual_seed(rows))
            with torch.inference_mode():
                for i, layer in enumerate(model.model.layers):
                    want = _layer_by_calls(layer, x.clone(), reference.keys[i], reference.values[i], past, cos, sin)
                    got = native_layers.layer(layer, x.clone(), kv, i, past, cos, sin, config)
                    assert torch.equal(got, want), (variant, rows, past, i)
                    x = want
            assert torch.equal(kv.keys, reference.keys) and torch.equal(kv.values, reference.values)
    finally:
        native.set_variant(before)


def test_a_layer_step_with_a_bad_shape_is_refused_not_run(files):
    from lsp_server.engine.lean_step import StaticKV, _rope_table

    model = load(files, "target")
    kv = StaticKV(model)
    kv.reserve(4)
    past = kv.capacity - 2
    cos, sin = (t[past:past + 4] for t in _rope_table(model, past + 4, torch.float32))
    x = torch.randn(4, model.config.hidden_size)
    with pytest.raises(RuntimeError, match="bad shape"):  # 4 new positions 2 before the cache's end
        native_layers.layer(model.model.layers[0], x.clone(), kv, 0, past, cos, sin, model.config)


def test_gate_and_up_fuse_into_one_view_of_the_file(files):
    model = load(files, "target")
    assert fuse_projections(model) >= 2
    mlp = model.model.layers[0].mlp
    fused = mlp._specfill_gate_up.module
    assert fused.blocks.data_ptr() == mlp.gate_proj.blocks.data_ptr()  # back to back: no copy
    x = torch.randn(3, 128)
    gate, up = mlp._specfill_gate_up(x)
    assert torch.equal(gate, mlp.gate_proj(x)) and torch.equal(up, mlp.up_proj(x))


def test_fused_layers_hold_their_parts_rows_once(files):
    model = load(files, "target")
    layer = model.model.layers[0]
    x = torch.randn(5, 128)
    before = {name: getattr(layer.mlp, name)(x) for name in ("gate_proj", "up_proj")}
    fuse_projections(model)
    fused = layer.mlp._specfill_gate_up.module._weight
    gate, up = layer.mlp.gate_proj._weight, layer.mlp.up_proj._weight
    # the parts' kernel weights are row views of the fused one, not copies beside it
    assert gate.weight.untyped_storage().data_ptr() == fused.weight.untyped_storage().data_ptr()
    assert up.weight.data_ptr() == fused.weight.data_ptr() + gate.weight.numel()
    for name, want in before.items():  # the same numbers as the parts' own copies gave
        assert torch.equal(getattr(layer.mlp, name)(x), want)


def test_a_draft_requantized_to_q4_0_holds_ggmls_own_q4_0_of_its_weights_in_fewer_bytes(files):
    import gguf

    draft = load(files, "draft")  # every matrix Q8_0
    plain = {name: m.dequantized_weight() for name, m in draft.named_modules() if isinstance(m, GGUFLinear)}
    before, after = requantize_to_q4_0(draft)
    assert after == before * 18 // 34  # Q8_0's 34 bytes a block of 32 against Q4_0's 18
    for name, module in draft.named_modules():
        if isinstance(module, GGUFLinear):
            assert module.type_id == Q4_0 and module._weight.type_id == native.REPACKED[Q4_0]
            want = gguf.quants.quantize(plain[name].numpy(), gguf.GGMLQuantizationType.Q4_0)
            assert np.array_equal(module.blocks.numpy(), want), name
    assert requantize_to_q4_0(draft) == (0, 0)  # nothing coarser to make


def test_requantizing_refuses_what_it_cannot_make():
    w = torch.zeros(8, native.row_bytes(Q8_0, 64), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="unsupported type"):
        native.requantize(Q8_0, w, 64, Q5_0)  # Q4_0 is the one coarser form made


@pytest.mark.parametrize("requantized", [False, True])
def test_greedy_speculation_between_gguf_models_is_the_targets_own_greedy_output(files, requantized):
    target, draft = load(files, "target"), load(files, "draft")
    if requantized:  # what the server loads: the draft in Q4_0
        requantize_to_q4_0(draft)
    for m in (target, draft):
        fuse_projections(m)
        setattr(m, ROWS_INDEPENDENT, True)
    engine = SpeculativeEngine(target, draft, CharTokenizer(), stop_ids=[])
    prompt = tuple(torch.randint(0, 256, (30,), generator=torch.Generator().manual_seed(5)).tolist())

    def run(mode: str, k: int):
        policy = DraftPolicy(context="t", k_init=k, k_min=1, k_max=k, max_new_tokens=40, stop=StopRule("none"),
                             draft_p_min=0.0, mode=mode, prompt_lookup=False)
        engine.clear_caches()
        return list(engine.generate(CompletionRequest("r", prompt, policy)))[-1]

    plain = run("off", 1)
    for k in (1, 3, 6):
        spec = run("fixed", k)
        assert spec.stats.drafted > 0
        assert spec.token_ids == plain.token_ids


def test_the_draft_head_is_a_prefix_view_of_the_files_rows(files):
    draft = load(files, "draft")
    head = draft_head(draft, common=64)
    assert head is not None and head.common.blocks.data_ptr() == draft.lm_head.blocks.data_ptr()
    assert head.common._weight.weight.data_ptr() == draft.lm_head._weight.weight.data_ptr()  # no second copy
    head.focus([200, 201])
    hidden = torch.randn(2, 128)
    logits = head(hidden)
    full = draft.lm_head(hidden)
    assert torch.equal(logits[:, :64], full[:, :64])
    assert torch.allclose(logits[:, [200, 201]], full[:, [200, 201]], rtol=0.05, atol=0.05)
    assert torch.isinf(logits[:, 100]).all()


def test_a_tensor_type_without_a_kernel_is_named_with_a_way_out(files, tmp_path):
    model, directory = files["draft"]
    model.config.save_pretrained(tmp_path)
    write_gguf(model, tmp_path / "model.gguf", {"blk.1.ffn_up.weight": 1})  # F16
    with pytest.raises(UnsupportedTensor, match=r"blk\.1\.ffn_up\.weight is F16.*requantize"):
        load_gguf_model(tmp_path, tmp_path / "model.gguf")


def test_bench_agreements_reference_is_the_files_weights_dequantized_and_counts_ties_apart(files):
    from lsp_server.bench import agreement

    model = load(files, "target")
    fuse_projections(model)
    want = dequantized_twin(files["target"][0], files["target"][1] / "model.gguf")  # gguf.quants' values
    got = agreement.dequantized_twin(model)
    ids = torch.randint(0, 256, (1, 20), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        assert torch.equal(got(input_ids=ids).logits, want(input_ids=ids).logits)
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 2.0 - agreement.NEAR_TIE / 2, 0.0], [5.0, 0.0, 1.0]])
    assert agreement.compare([1, 1, 2], logits) == {"positions": 3, "agree": 1, "near_ties": 1,
                                                    "margins": [agreement.NEAR_TIE / 2, 4.0]}


def test_a_requantized_drafts_fused_layers_are_views_of_its_new_blocks_not_copies(files):
    draft = load(files, "draft")
    requantize_to_q4_0(draft)
    fuse_projections(draft)
    for layer in draft.model.layers:
        for owner, attr, first in ((layer.self_attn, "_specfill_qkv", "q_proj"),
                                   (layer.mlp, "_specfill_gate_up", "gate_proj")):
            fused = getattr(owner, attr).module
            assert fused.blocks.data_ptr() == getattr(owner, first).blocks.data_ptr()


def test_the_head_in_pieces_gives_the_same_logits_bit_for_bit(files):
    head = load(files, "target").get_output_embeddings()
    pieces = head_pieces(head, -(-head.blocks.numel() // 3))
    starts = [start for start, _ in pieces]
    assert len(pieces) == 3 and starts == sorted(starts) and all(s % 8 == 0 for s in starts)
    assert sum(p.out_features for _, p in pieces) == head.out_features
    x = torch.randn(5, head.in_features, generator=torch.Generator().manual_seed(2))
    assert torch.equal(torch.cat([p(x) for _, p in pieces], dim=1), head(x))
    assert head_pieces(head, head.blocks.numel()) is None  # one piece: the layer itself


@pytest.mark.parametrize("stop_in_piece", [1, 2])
def test_an_abort_inside_the_head_leaves_the_cache_as_it_was(files, stop_in_piece):
    model = load(files, "target")
    fuse_projections(model)
    setattr(model, ROWS_INDEPENDENT, True)
    head = model.get_output_embeddings()
    model._specfill_layer_bytes = -(-head.blocks.numel() // 3)  # as if the head cost 3 layers
    layers = model.config.num_hidden_layers
    seq = torch.randint(0, 256, (12,), generator=torch.Generator().manual_seed(4))
    checks = 0

    def stop_in_the_head() -> None:
        nonlocal checks
        checks += 1
        if checks == layers + 1 + stop_in_piece:  # the checks before the pieces after the first
            raise Aborted()

    kv, plain = StaticKV(model), StaticKV(model)
    with torch.inference_mode():
        lean_forward(model, kv, seq[:8], all_logits=False)
        lean_forward(model, plain, seq[:8], all_logits=False)
        with pytest.raises(Aborted):
            lean_forward(model, kv, seq[8:], all_logits=True, between_layers=stop_in_the_head)
        assert kv.length == 8
        got = lean_forward(model, kv, seq[8:], all_logits=True, between_layers=lambda: None)
        want = lean_forward(model, plain, seq[8:], all_logits=True)
    assert checks == layers + 1 + stop_in_piece
    assert torch.equal(got, want)


def test_a_stop_request_ends_a_native_layer_step_and_leaves_the_cache_as_it_was(files):
    model = load(files, "target")
    fuse_projections(model)
    setattr(model, ROWS_INDEPENDENT, True)
    assert native_layers.fit(model)
    seq = torch.randint(0, 256, (30,), generator=torch.Generator().manual_seed(8)).tolist()
    stopped, plain = LeanSlot(model), LeanSlot(model)
    with torch.inference_mode():
        stopped.feed(seq[:20])
        plain.feed(seq[:20])
        native.request_stop()
        try:
            plain.feed(seq[20:25])  # a thread that does not listen for stops: not stopped
            plain.rewind(20)
            native.listen_for_stops(True)
            with pytest.raises(Aborted):
                stopped.feed(seq[20:25])  # 5 rows: the native one-call layers
        finally:
            native.listen_for_stops(False)
            native.clear_stop()
        assert stopped.ids == seq[:20] and stopped.kv.length == 20
        got = stopped.feed(seq[20:30])
        want = plain.feed(seq[20:30])
    assert torch.equal(got, want)


def test_a_stop_from_another_thread_at_any_moment_leaves_the_cache_right(tmp_path):
    """Matrices many ~128 KB chunks tall, so that most stops land inside a product, between
    two chunks of a share: whenever one lands, the step either ends whole or raises Aborted
    with the cache as it was, and the next feed equals a slot's that was never stopped."""
    import threading
    import time

    model = qwen2_for_fusing(3, hidden=512, ffn=4096)  # gate_up ~34 chunks, down ~32
    model.config.save_pretrained(tmp_path)
    write_gguf(model, tmp_path / "model.gguf")
    model = load_gguf_model(tmp_path, tmp_path / "model.gguf")
    fuse_projections(model)
    setattr(model, ROWS_INDEPENDENT, True)
    assert native_layers.fit(model)
    seq = torch.randint(0, 256, (60,), generator=torch.Generator().manual_seed(9)).tolist()
    stopped, plain = LeanSlot(model), LeanSlot(model)
    rng = np.random.default_rng(1)
    with torch.inference_mode():
        stopped.feed(seq[:20])
        plain.feed(seq[:20])
        began = time.perf_counter()
        plain.feed(seq[20:36])
        one_feed = time.perf_counter() - began  # to spread the stops over a whole feed
        plain.rewind(20)
        native.listen_for_stops(True)
        try:
            for _ in range(12):
                stopper = threading.Timer(rng.uniform(0.0, one_feed), native.request_stop)
                stopper.start()
                try:
                    got = stopped.feed(seq[20:36])  # 16 rows
                except Aborted:
                    got = None
                stopper.join()
                native.clear_stop()
                if got is None:
                    assert stopped.ids == seq[:20] and stopped.kv.length == 20
                else:
                    assert torch.equal(got, plain.feed(seq[20:36]))
                    stopped.rewind(20)
                    plain.rewind(20)
        finally:
            native.listen_for_stops(False)
            native.clear_stop()
        got = stopped.feed(seq[20:60])
        want = plain.feed(seq[20:60])
    assert torch.equal(got, want)
