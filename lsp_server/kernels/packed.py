"""bf16 Linear layers with their weights packed once in oneDNN's blocked layout (CPU).

`F.linear` on a bf16 CPU tensor hands the weight to oneDNN in its plain [N, K] layout on
every call, which oneDNN has to take as it is or reorder first (our reading of why it is
slow; not profiled inside oneDNN): the 1.5B target's matrices streamed at 15-19 GB/s for
one-token steps where a plain sum over the same bytes streams ~49 GB/s. Reordering once at
load and calling oneDNN's linear on the packed weight
(`torch.ops.mkldnn._reorder_linear_weight` and `_linear_pointwise`, one of the choices
Inductor's freezing pass offers for bf16 linears) is ~2.2x faster at 1-5 rows (one-off sweep
over the target's shapes, 2 threads: 200 -> 93 ms for one row, 185 -> 81 ms for five) and
7-25 % faster for 32-300 rows, and the kernel's outputs are F.linear's bits (checked per
layer at load, and in tests/unit/test_kernels_packed.py).

oneDNN also picks its kernel by the number of rows, and here (AVX-512 bf16, no AMX, 2
threads) its 1-3 row kernels stream weights more slowly than its 4-row one: a pass over all
the target's packed layers took 107, 125, 87 and 82 ms for 1, 2, 3 and 4 rows. So calls of
1-3 rows run as 4-row calls padded with zero rows (`PAD_TO`): the bf16 target alone
decoded 10 % faster and speculatively 5 % faster (one-off A/B, 8 and 16 HumanEval prompts,
same outputs). Where a CPU's small-row kernels are as fast, padding costs three rows of
arithmetic on weights read anyway. Each row's numbers are then those of a 4-row call: a
row was never computed the same way at every row count (oneDNN's kernels differ), which is
why speculative output equals the target's own only up to bf16 near-ties, padded or not.

For a bf16 layer the packed weight is a second copy (the bf16 weights' memory again): the
layer keeps its own weight for transformers' forward, which stays stock, and `lean_step`
calls the packed form (a plain attribute, not a submodule: state dicts and weight counts
are unchanged).
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import nn
from torch.nn import functional as F

ATTR = "_specfill_packed"
# Calls of these row counts (2-D inputs) run as 4-row calls padded with zero rows.
PAD_TO = {1: 4, 2: 4, 3: 4}


class PackedLinear:
    """y = x W^T + b with W [N, K] bf16 packed for oneDNN; x [..., K] bf16."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.out_features, self.in_features = weight.shape
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous())
        self.bias = None if bias is None else bias.detach()

    def raw(self, x: torch.Tensor) -> torch.Tensor:
        """The kernel on exactly these rows (F.linear's bits)."""
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        to = PAD_TO.get(x.shape[0]) if x.dim() == 2 else None
        if to is None:
            return self.raw(x)
        return self.raw(torch.cat([x, x.new_zeros(to - x.shape[0], x.shape[1])]))[: x.shape[0]]


@lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """None where oneDNN's packed bf16 linear runs here; else why not (it needs AVX-512 BW/VL/DQ
    or AVX-NE-CONVERT: on an AVX2-only CPU the reorder raises)."""
    if not torch.backends.mkldnn.is_available():
        return "torch build without oneDNN"
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=torch.bfloat16))
    except RuntimeError as err:
        return f"oneDNN's packed bf16 linear does not run on this CPU ({str(err).splitlines()[0][:160]})"
    return None


def packable(module: nn.Module) -> bool:
    """A plain bf16 nn.Linear on the CPU, where oneDNN's packed bf16 path runs here."""
    return (type(module) is nn.Linear and module.weight.dtype == torch.bfloat16
            and module.weight.device.type == "cpu" and unavailable_reason() is None
            and (module.bias is None or module.bias.dtype == torch.bfloat16))


def same_numbers(packed: PackedLinear, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the packed form computes F.linear's bits for 1, 2 and 40 rows (a step, a
    verify, a prefill): checked on the machine rather than assumed, since the kernels
    oneDNN picks depend on the CPU."""
    x = torch.randn(40, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with torch.inference_mode():
        return all(torch.equal(packed.raw(x[:rows]), F.linear(x[:rows], weight, bias)) for rows in (1, 2, 40))


def pack(weight: torch.Tensor, bias: torch.Tensor | None) -> PackedLinear | None:
    """The packed form of a bf16 weight (and bias), or None where oneDNN would not
    compute the same numbers or refuses the layer."""
    try:
        packed = PackedLinear(weight, bias)
        return packed if same_numbers(packed, weight, bias) else None
    except RuntimeError:  # a build or CPU without oneDNN's bf16 path
        return None


def pack_linears(model: nn.Module) -> int:
    """Give every packable Linear of `model` (the output layer included) a packed copy as
    `module._specfill_packed`. Idempotent; returns how many layers have one.

    Quantized layers' bf16 prefill copies (quantize.keep_dense_for_prefill) stay as they
    are: packed, prefills got 7-25 % faster in a sweep, but the server's first token did
    not move (0.110 vs 0.114 s p50), while the copies became 3.4 GB of private memory
    (RSS 6.0 -> 9.4 GB) and loading took 6 s longer."""
    count = 0
    for module in model.modules():
        if not packable(module):
            continue
        if not hasattr(module, ATTR):  # None: refused, or fused away (kernels.fuse)
            setattr(module, ATTR, pack(module.weight, module.bias))
        count += getattr(module, ATTR) is not None
    return count


def packed_form(module: nn.Module) -> PackedLinear | None:
    return getattr(module, ATTR, None)


def linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The layer's packed form where it has one, else the layer itself."""
    packed = getattr(module, ATTR, None)
    return packed(x) if packed is not None else module(x)
