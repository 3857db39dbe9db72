"""The GGUF file as the model: its quantized blocks, memory-mapped, are the weights.

A decoder's matrices stay in the file's own blocks (Q4_K, Q6_K, Q5_0, Q8_0) and are
multiplied there by our native kernels (`kernels.native`): nothing is dequantized or
converted at load (the kernels' 8-row repacking copies the same bytes), and a weight's
bytes are read from the page cache the first time a step needs them. The one exception is
a draft's (`requantize_to_q4_0`): its weights only decide what it proposes, so its finer
blocks are made Q4_0 at load for fewer bytes a step. Norms and biases (F32 in the file)
become fp32 parameters; the token embedding stays in its blocks too, and a lookup
dequantizes the rows it needs.

Activations are fp32: on CPUs without native bf16 (AVX2 machines) fp32 is the fast float
type, and the kernels take fp32 rows anyway (they quantize each row to int8 themselves).

Every output row of a native product is computed by the same instructions whatever the
number of rows (`kernels.native`), so a verify of k+1 rows equals k+1 one-row steps bit
for bit: the model is marked rows-independent and greedy speculation is exact.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .gguf_index import tensor_table
from . import native

# ggml type ids of the tensors the native kernels multiply, and the plain float ones.
F32, F16, Q4_0 = 0, 1, 2
NATIVE_TYPES = native.TYPES
# bits a weight of each native block type costs (its scales included)
BITS = {2: 4.5, 6: 5.5, 8: 8.5, 12: 4.5, 14: 6.5625}

# Hugging Face module names of a Qwen2 / Llama-style decoder -> GGUF tensor names.
_LAYER_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
}  # fmt: skip
_TOP_NAMES = {"lm_head": "output", "model.norm": "output_norm", "model.embed_tokens": "token_embd"}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def gguf_name(module_name: str) -> str:
    """'model.layers.3.mlp.up_proj' -> 'blk.3.ffn_up' (add '.weight' / '.bias')."""
    if module_name in _TOP_NAMES:
        return _TOP_NAMES[module_name]
    match = _LAYER.match(module_name)
    if match is None or match.group(2) not in _LAYER_NAMES:
        raise KeyError(f"no GGUF name for module {module_name!r}")
    return f"blk.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"


@dataclass(frozen=True)
class Tensor:
    name: str
    type_id: int
    type_name: str
    shape: tuple[int, int]  # [rows, K] as torch sees it (GGUF lists K first)
    data: torch.Tensor  # uint8 [rows, row_bytes] for block types, float32 [rows, K] / [K] for F32


class GGUFFile:
    """The tensors of one GGUF file, as read-only views of one memory map of it."""

    def __init__(self, path: Path):
        import numpy as np
        from gguf import GGMLQuantizationType

        self.path = Path(path)
        table = tensor_table(self.path)
        self._map = np.memmap(self.path, dtype=np.uint8, mode="r")  # kept: backs every view
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # a read-only map: never written
            whole = torch.from_numpy(self._map)  # uint8 [file bytes], one storage
        self.tensors: dict[str, Tensor] = {}
        for name, type_id, dims, offset, size in table:
            shape = (dims[1] if len(dims) > 1 else 1, dims[0])
            if offset + size > whole.numel():
                raise ValueError(f"{self.path.name} is truncated: tensor {name} ends past the end of the file")
            raw = whole[offset:offset + size]
            # Views of the one map, so tensors that lie back to back (gate and up) can be one.
            data = raw.view(torch.float32) if type_id == F32 else raw.view(shape[0], -1)
            self.tensors[name] = Tensor(name, type_id, GGMLQuantizationType(type_id).name, shape, data)

    def get(self, name: str) -> Tensor:
        try:
            return self.tensors[name]
        except KeyError:
            raise KeyError(f"{self.path.name} has no tensor {name!r}") from None

    def floats(self, name: str) -> torch.Tensor:
        """An F32 / F16 tensor (a norm, a bias) as an fp32 copy."""
        t = self.get(name)
        if t.type_id not in (F32, F16):
            raise ValueError(f"{name} is {t.type_name} in {self.path.name}; expected F32")
        values = t.data if t.type_id == F32 else t.data.reshape(-1).view(torch.float16)
        return values.to(torch.float32).clone().reshape(-1)


class GGUFLinear(nn.Module):
    """y = x W^T + b with W in GGUF blocks [N, row_bytes]; any float x in, the same dtype out."""

    kind = "gguf"

    def __init__(self, blocks: torch.Tensor, type_id: int, in_features: int, bias: torch.Tensor | None,
                 weight: native.Weight | None = None):
        """`weight`: the kernel's form of `blocks` where it is already made (a view of a
        larger layer's), else it is made when first needed (`_weight`: repacked, a copy)."""
        super().__init__()
        if type_id not in NATIVE_TYPES:
            raise ValueError(f"no native kernel for ggml type {type_id}")
        self.type_id, self.in_features, self.out_features = type_id, in_features, blocks.shape[0]
        self.blocks = blocks  # a plain attribute: a view of the file map, not state to save
        self.bias = bias
        self._form = weight

    @property
    def _weight(self) -> native.Weight | None:
        """The kernel's form of the blocks (None without the native library), made on first
        use. Why not at construction: a layer that is fused (`fuse_rows`) or requantized
        (`requantize_to_q4_0`) at load would have had a copy that is dropped at once, and
        the weight copies come from a huge-page arena that never hands space out twice
        (kernels/huge_pages.py): with them the server peaked at 3.54 GB in `specfill bench
        lsp --session open`, 2.72 GB without (AMD EPYC Zen 4), and the fused layers' own
        copies were in 4 KB pages."""
        if self._form is None and native.available():
            self._form = native.Weight(self.type_id, self.blocks, self.in_features)
        return self._form

    @classmethod
    def from_file(cls, file: GGUFFile, name: str, bias: bool) -> GGUFLinear:
        t = file.get(f"{name}.weight")
        if t.type_id not in NATIVE_TYPES:
            raise UnsupportedTensor(t)
        return cls(t.data, t.type_id, t.shape[1], file.floats(f"{name}.bias") if bias else None)

    def rows(self, start: int, stop: int) -> GGUFLinear:
        """The layer of output rows start..stop-1: a view of the file's blocks (rows are whole
        blocks) and, where they are whole groups of 8 rows, of this layer's repacked copy."""
        bias = None if self.bias is None else self.bias[start:stop]
        weight = None if self._weight is None else self._weight.rows(start, stop)
        return GGUFLinear(self.blocks[start:stop], self.type_id, self.in_features, bias, weight)

    def dequantized_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """fp32 [len(ids), K]: the weight rows of these output ids."""
        return native.dequantize(self.type_id, self.blocks[ids].contiguous(), self.in_features)

    def dequantized_weight(self) -> torch.Tensor:
        return native.dequantize(self.type_id, self.blocks, self.in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._weight is None:
            raise RuntimeError(native.why_unavailable())
        flat = x.reshape(-1, self.in_features)
        if flat.dtype != torch.float32 or not flat.is_contiguous() or flat.device.type != "cpu":
            flat = flat.to("cpu", torch.float32).contiguous()  # [M, K]
        y = self._weight.matmul(flat, torch.empty(flat.shape[0], self.out_features))  # [M, N] fp32
        if self.bias is not None:
            y += self.bias
        if x.dtype != torch.float32:
            y = y.to(x.dtype)
        return y if x.dim() == 2 else y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"{NATIVE_TYPES[self.type_id]}, bias={self.bias is not None}")


def _back_to_back(parts: list[torch.Tensor]) -> torch.Tensor | None:
    """The parts' rows as one view where they lie back to back in one buffer, else None."""
    first = parts[0]
    if any(p.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or not p.is_contiguous()
           for p in parts):
        return None
    if any(a.data_ptr() + a.numel() != b.data_ptr() for a, b in zip(parts, parts[1:])):
        return None
    return first.new_empty(0).set_(first.untyped_storage(), first.storage_offset(),
                                   (sum(p.shape[0] for p in parts), first.shape[1]))


def fuse_rows(parts: list[GGUFLinear]) -> GGUFLinear | None:
    """One layer of the parts' stacked rows (q/k/v, gate/up), or None where their block types
    differ. Its blocks are a view where the file holds them back to back, else a copy. Its
    kernel form is the parts' repacked copies stacked, and the parts become row views of it,
    so the rows are in memory once (with a copy per part, gate/up alone were 0.43 GB more
    for the 1.5B target). Each output row is its own dot product, so the fused layer
    computes each part's numbers."""
    if len({p.type_id for p in parts}) != 1 or len({p.in_features for p in parts}) != 1:
        return None
    if len({p.bias is None for p in parts}) != 1:
        return None
    blocks = _back_to_back([p.blocks for p in parts])
    if blocks is None:
        blocks = torch.cat([p.blocks for p in parts])
    bias = None if parts[0].bias is None else torch.cat([p.bias for p in parts])
    fused = GGUFLinear(blocks, parts[0].type_id, parts[0].in_features, bias)
    if any(p._form is not None for p in parts):  # made already (a forward ran): stack those
        if all(p._weight is not None for p in parts):
            fused._form = native.Weight.stacked([p._weight for p in parts])
        return fused
    if fused._weight is None:  # no native library: nothing to share
        return fused
    # One repack of the stacked blocks, the parts row views of it: groups of 8 rows never
    # straddle parts whose widths are whole groups, so each part's rows are what its own
    # repack would give.
    views, start = [], 0
    for p in parts:
        views.append(fused._weight.rows(start, start + p.out_features))
        start += p.out_features
    if all(v is not None for v in views):
        for p, view in zip(parts, views):
            p._form = view
    return fused


class GGUFEmbedding(nn.Module):
    """Token embedding left in its GGUF blocks: a lookup dequantizes just the rows it needs."""

    def __init__(self, blocks: torch.Tensor, type_id: int, dim: int):
        super().__init__()
        self.type_id, self.embedding_dim, self.num_embeddings = type_id, dim, blocks.shape[0]
        self.blocks = blocks

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        rows = native.dequantize(self.type_id, self.blocks[flat].contiguous(), self.embedding_dim)
        return rows.reshape(*ids.shape, self.embedding_dim)  # [..., H] fp32


class UnsupportedTensor(ValueError):
    def __init__(self, t: Tensor):
        super().__init__(
            f"tensor {t.name} is {t.type_name}, which specfill's native kernels do not multiply "
            f"(they take {', '.join(NATIVE_TYPES.values())}); requantize the file to Q4_K_M with "
            "llama.cpp's llama-quantize, or set model.quant to bf16")


def _set_parameter(model: nn.Module, name: str, value: torch.Tensor) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(model.get_submodule(owner), attr, nn.Parameter(value, requires_grad=False))


def load_gguf_model(config_dir: Path | None, gguf_path: Path) -> nn.Module:
    """A transformers causal LM whose layers multiply straight from `gguf_path`'s blocks;
    the architecture comes from `config_dir`'s config.json, or (None: a bare .gguf given as
    the model) from the file's own metadata; shapes are checked tensor by tensor."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if config_dir is None:
        config = AutoConfig.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    else:
        config = AutoConfig.from_pretrained(str(config_dir))
    if config.model_type not in ("qwen2", "llama"):
        raise ValueError(f"native GGUF kernels support qwen2 and llama decoders, not {config.model_type}")
    file = GGUFFile(gguf_path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear):
            layer = GGUFLinear.from_file(file, gguf_name(name), module.bias is not None)
            if (layer.out_features, layer.in_features) != (module.out_features, module.in_features):
                raise ValueError(f"{name}: {gguf_path.name} has {layer.out_features}x{layer.in_features}, "
                                 f"config.json says {module.out_features}x{module.in_features}")
            _replace(model, name, layer)
    embed = file.get("token_embd.weight")
    if embed.type_id not in NATIVE_TYPES:
        raise UnsupportedTensor(embed)
    _replace(model, "model.embed_tokens", GGUFEmbedding(embed.data, embed.type_id, embed.shape[1]))
    for name, param in list(model.named_parameters()):
        _set_parameter(model, name, file.floats(f"{gguf_name(name.rpartition('.')[0])}.weight"))
    inner = model.model
    inner.rotary_emb = type(inner.rotary_emb)(config=config)  # its buffers were made on meta
    leftover = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if leftover:
        raise ValueError(f"{gguf_path.name}: no weights for {', '.join(leftover[:4])}")
    model.gguf_file = file  # keeps the map alive as long as the model
    model.eval()
    return model


# Layers that read one input and fuse into one product (kernels.fuse): requantized into one
# buffer, back to back, so that the fused layer's blocks are a view of them, not a copy.
_SIBLINGS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


def _coarser_than_q4_0(module: nn.Module) -> bool:
    return isinstance(module, GGUFLinear) and BITS[module.type_id] > BITS[Q4_0] and module.in_features % 32 == 0


def requantize_to_q4_0(model: nn.Module) -> tuple[int, int]:
    """Each GGUFLinear whose blocks cost more than Q4_0's 4.5 bits a weight (Q5_0, Q8_0,
    Q6_K) gets its weights requantized to Q4_0 (native.requantize: its own dequantized
    values, ggml's reference rounding). For a draft model only: its weights change which
    tokens it proposes (acceptance), never the output, which the target's verify decides.
    Returns (bytes before, bytes after) of the layers it changed."""
    before = after = 0
    done: set[str] = set()
    for name, module in list(model.named_modules()):
        if name in done or not _coarser_than_q4_0(module):
            continue
        owner, _, attr = name.rpartition(".")
        siblings = next((group for group in _SIBLINGS if attr in group), (attr,))
        names = [f"{owner}.{n}" if owner else n for n in siblings]
        parts = [getattr(model.get_submodule(owner) if owner else model, n, None) for n in siblings]
        if not all(p is not None and _coarser_than_q4_0(p) and p.in_features == module.in_features for p in parts):
            names = [name]  # a sibling stays as it is: this one alone
        done.update(names)
        b, a = _requantize(names, model)
        before, after = before + b, after + a
    return before, after


def _requantize(names: list[str], model: nn.Module) -> tuple[int, int]:
    parts = [model.get_submodule(n) for n in names]
    K = parts[0].in_features
    size = native.row_bytes(Q4_0, K)
    buffer = torch.empty(sum(p.out_features for p in parts), size, dtype=torch.uint8)
    start = 0
    for name, module in zip(names, parts):
        blocks = buffer[start:start + module.out_features]
        native.requantize(module.type_id, module.blocks, K, Q4_0, out=blocks)
        start += module.out_features
        _replace(model, name, GGUFLinear(blocks, Q4_0, K, module.bias))
    return sum(p.blocks.numel() for p in parts), buffer.numel()


def _replace(model: nn.Module, name: str, module: nn.Module) -> None:
    owner, _, attr = name.rpartition(".")
    setattr(model.get_submodule(owner) if owner else model, attr, module)


def block_weights(model: nn.Module) -> tuple[int, int]:
    """(weights, bytes) that `model` keeps in GGUF blocks; (0, 0) for any other model."""
    count = size = 0
    for m in model.modules():
        if isinstance(m, (GGUFLinear, GGUFEmbedding)):
            count += m.blocks.shape[0] * (m.in_features if isinstance(m, GGUFLinear) else m.embedding_dim)
            size += m.blocks.numel()
    return count, size
