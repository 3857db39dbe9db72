"""`nn.Linear` with int8 weights and int8 activations quantized on the fly (W8A8, dynamic).

torch's weight-only int4 kernel is bound by its own arithmetic on this CPU, not by memory:
one 1536 x 8960 layer takes 0.40 ms for one row and 0.78 ms for four (2 threads), so the
few rows of a speculative verify cost almost as much as a plain step each. fbgemm's dynamic
int8 linear (`quantized::linear_dynamic`, the `x86` engine) quantizes each call's input to
uint8 with one scale and multiplies with integer dot-product instructions: 0.11 ms for one
row and 0.18 ms for four on the same layer. Weights are per output channel int8 as in
`Int8Linear`, which is what the on-disk cache stores; the kernel's packed copy is built at
every load (~8 s for the 1.5B target here), and fbgemm keeps the int8 weights beside it.

The kernel takes one input scale per call, set by the largest and smallest value among
all the rows. A row's result would then depend on the rows beside it, and a verify of k+1
rows would not compute what k+1 single steps compute: speculation would stop reproducing
the model's own greedy output. So each row is scaled to largest magnitude 1 and given two
extra inputs, -1 and +1, whose weights are 0: every call's range is exactly [-1, 1], each
row is quantized as if alone, and the result is scaled back per row (bias added after).

One input scale per row is still coarse where a few input channels are far larger than the
rest: the MLP's down projection of Qwen2-style models. There the `w8a8` mode keeps torch's
weight-only int4 kernel (see `quantize.W8A8_WEIGHT_ONLY`).

On CPUs without VNNI, fbgemm adds pairs of uint8 x int8 products in saturating 16 bits;
inputs limited to 7 bits (`reduce_range`) cannot overflow there.
"""

from __future__ import annotations

import warnings
from functools import lru_cache

import torch
from torch import nn

from .quant_fit import quantize_int8

_ENGINE = "x86"


@lru_cache(maxsize=1)
def _reduce_range() -> bool:
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return True
    return not any(flag in flags for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))


def w8a8_available() -> bool:
    return _ENGINE in torch.backends.quantized.supported_engines


_RANGE_COLUMNS = 2  # the extra -1 / +1 inputs that fix every call's range
_RANGE_ENDS = torch.tensor([[-1.0, 1.0]])  # [1, 2]: built once, not in every forward


def _pack(weight: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """int8 [N, K] weight + [N] scales -> fbgemm's packed form (an opaque torch object) of
    [N, K + 2]: the two range columns get weight 0."""
    torch.backends.quantized.engine = _ENGINE
    padded = torch.cat([weight, weight.new_zeros(weight.shape[0], _RANGE_COLUMNS)], dim=1)
    zeros = torch.zeros(weight.shape[0], dtype=torch.long)
    with warnings.catch_warnings():
        # torch 2.13 warns that quantized tensor types will go in a later release; the
        # project pins torch, and the kernels' own tests cover this path.
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        qweight = torch._make_per_channel_quantized_tensor(padded, scales.double(), zeros, 0)
    return torch.ops.quantized.linear_prepack(qweight, None)


class W8A8Linear(nn.Module):
    """bf16 in, bf16 out; int8 x int8 inside. State dict: weight (int8), scales, bias."""

    kind = "w8a8"

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32) if bias else None)
        self.packed = None  # set by from_linear or load_state_dict

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> W8A8Linear:
        bias = linear.bias.detach() if linear.bias is not None else None
        return cls.from_int8(*quantize_int8(linear.weight), bias)

    @classmethod
    def from_int8(cls, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None) -> W8A8Linear:
        """From int8 weights [N, K] and their per-channel scales [N] (and a bias [N])."""
        module = cls(weight.shape[1], weight.shape[0], bias is not None)
        module.packed = _pack(weight, scales)
        if bias is not None:
            module.bias = bias.float().clone()
        return module

    def unpacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(int8 weight [N, K], scales [N] fp32) from the packed form."""
        qweight, _ = torch.ops.quantized.linear_unpack(self.packed)
        return qweight.int_repr()[:, : self.in_features], qweight.q_per_channel_scales().float()

    def dequantized_weight(self) -> torch.Tensor:
        weight, scales = self.unpacked()
        return weight.float() * scales[:, None]

    @property
    def packed_bytes(self) -> int:
        """Bytes a call reads: the packed weights and the per-channel scales."""
        return (self.in_features + _RANGE_COLUMNS) * self.out_features + 4 * self.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float()  # [M, K]
        peak = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-20)  # [M, 1]
        ends = _RANGE_ENDS.expand(flat.shape[0], _RANGE_COLUMNS)
        y = torch.ops.quantized.linear_dynamic(torch.cat([flat / peak, ends], dim=1), self.packed, _reduce_range())
        y = y * peak
        if self.bias is not None:
            y = y + self.bias
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    # The packed object is not a tensor: the state dict holds its int8 contents instead.
    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        weight, scales = self.unpacked()
        destination[prefix + "weight"] = weight.contiguous()
        destination[prefix + "scales"] = scales
        if self.bias is not None:
            destination[prefix + "bias"] = self.bias

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:
        names = ["weight", "scales"] + (["bias"] if self.bias is not None else [])
        missing = [prefix + n for n in names if prefix + n not in state_dict]
        missing_keys.extend(missing)
        unexpected_keys.extend(k for k in state_dict if k.startswith(prefix) and k[len(prefix):] not in names)
        if missing:
            return
        weight = state_dict[prefix + "weight"]
        if weight.dtype != torch.int8 or tuple(weight.shape) != (self.out_features, self.in_features):
            error_msgs.append(f"{prefix}weight: expected int8 {self.out_features}x{self.in_features}, "
                              f"got {weight.dtype} {tuple(weight.shape)}")
            return
        self.packed = _pack(weight, state_dict[prefix + "scales"])
        if self.bias is not None:
            self.bias = state_dict[prefix + "bias"].float().clone()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
