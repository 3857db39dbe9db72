"""`nn.Linear` with int8 weights and int8 activations quantized per row (W8A8, dynamic),
on zentorch's kernel (`torch.ops.zentorch.zentorch_dynamic_qlinear`, AMD's ZenDNN plugin).

Why this kernel: a speculative verify feeds k+1 rows through every layer, and it pays only
when that costs about one single-row step. torch's weight-only int4 kernel is bound by its
own arithmetic on these CPUs (a pass over the 1.5B target's layers: 23 ms for one row,
74 ms for five); zentorch's int8 x int8 kernel reads half the bytes of bf16 and stays
nearly flat in rows (22 ms for one row, 28 ms for five, 32 ms for eight; issue 16's sweep).

Why W8A8 is exact for speculation: the kernel quantizes each input row on its own (one
scale per row), so every row of a k+1-row call equals the same row computed alone, bit for
bit (checked per layer at load by `check`, and in tests): a verify computes exactly what
k+1 single steps compute, and greedy speculation reproduces the model's own greedy output.

Weights are int8, symmetric per output channel (`quant_fit.quantize_int8`), fp32 scales.
The kernel keeps a reordered copy of an unpacked weight in its own cache the first time it
sees that buffer (the first call is slow): `warm` calls every layer once at load, so no
completion pays for it. Our own int8 weights then are never read again; a model loaded from
the quantized cache holds them in a read-only map of the cache file, whose pages go back to
the system after load (`quant_cache.map_int8`, `file_pages`): 5.95 -> 3.6 GB of server RSS
for the default pair, with the kernel's copy the one in memory. Its prepacked form would avoid the copy, but
returned wrong numbers for K >= 4,864 and was 4-5x slower at one row here; it is not used.
A weight buffer the cache has seen is never freed or replaced while the model lives, so a
new tensor at the same address can never meet a stale cache entry.

Where zentorch is missing or fails its check (`status`), the `w8a8` mode is refused with a
way out, and the runtime's `auto` falls back to torch's int4 kernels.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import nn

from . import cpu
from .quant_fit import quantize_int8

# A layer's int8 product must be this close to the product with its dequantized weight.
# Per-row int8 activations give ~0.5-1.2 % on random data; wrong kernels give 5-100x that.
MAX_RELATIVE_ERROR = 0.05
# Row counts checked at load: a step, verifies, and a prefill chunk.
_CHECK_ROWS = (1, 3, 9)
_CHECK_CHANNELS = 512


@dataclass(frozen=True)
class KernelStatus:
    usable: bool
    why: str  # what runs, or why not: shown by the load log and `specfill doctor`


@lru_cache(maxsize=1)
def status() -> KernelStatus:
    """Whether zentorch's W8A8 kernel can run here, and why (not)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return KernelStatus(False, f"zentorch has no build for {platform.system()} {platform.machine()}")
    if "avx512_vnni" not in cpu.flags():
        # Never imported or probed there: its int8 GEMMs return garbage and print libdlp
        # lines to stderr (the editor's output panel) on every call.
        return KernelStatus(False, f"zentorch's int8 kernel needs AVX512-VNNI, which this CPU lacks ({cpu.describe()})")
    try:
        import zentorch  # noqa: F401  registers torch.ops.zentorch
    except Exception as err:  # ImportError, or a binary that does not load on this CPU
        return KernelStatus(False, f"zentorch does not import ({type(err).__name__}: {err})"[:200])
    try:
        layer = W8A8Linear.from_linear(_probe_linear())
        problem = check(layer)
    except Exception as err:  # the op exists but can't run here (missing instructions)
        return KernelStatus(False, f"zentorch's int8 kernel fails here ({type(err).__name__}: {err})"[:200])
    if problem:
        return KernelStatus(False, f"zentorch's int8 kernel computes wrong numbers here ({problem})")
    import zentorch

    return KernelStatus(True, f"zentorch {getattr(zentorch, '__version__', '?')} int8 x int8 (rows independent)")


@lru_cache(maxsize=1)
def _import_kernel() -> None:
    """Register torch.ops.zentorch (an ImportError here means `status()` said no)."""
    import zentorch  # noqa: F401


def w8a8_available() -> bool:
    return status().usable


def _probe_linear() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(256, 96, bias=True).to(torch.bfloat16)


# Every weight the kernel has seen, kept alive for the life of the process: its cache holds
# a reordered copy keyed by the buffer, so a freed buffer's address reused by another weight
# of the same shape would silently compute with the old values (seen here: a weight zeroed
# in place after one call still gave the old outputs). Costs memory only where layers are
# dropped, i.e. a model reload in the server and tests that build many models.
_SEEN: list[torch.Tensor] = []


class W8A8Linear(nn.Module):
    """bf16 in, bf16 out; int8 x int8 inside. State dict: weight (int8 [N, K]), scales
    (fp32 [N]), bias (bf16 [N], optional)."""

    kind = "w8a8"

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        _import_kernel()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.empty(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scales", torch.empty(out_features, dtype=torch.float32))
        self.register_buffer("bias", torch.empty(out_features, dtype=torch.bfloat16) if bias else None)
        self._seen: torch.Tensor | None = None  # the weight last registered in _SEEN

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> W8A8Linear:
        bias = linear.bias.detach() if linear.bias is not None else None
        return cls.from_int8(*quantize_int8(linear.weight), bias)

    @classmethod
    def from_int8(cls, weight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None) -> W8A8Linear:
        """From int8 weights [N, K] and their per-channel scales [N] (and a bias [N])."""
        module = cls(weight.shape[1], weight.shape[0], bias is not None)
        module.weight = weight.contiguous()
        module.scales = scales.float().contiguous()
        if bias is not None:
            module.bias = bias.to(torch.bfloat16).clone()
        return module

    def unpacked(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(int8 weight [N, K], scales [N] fp32)."""
        return self.weight, self.scales

    def dequantized_weight(self) -> torch.Tensor:
        return self.weight.float() * self.scales[:, None]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)
        if flat.dtype != torch.bfloat16 or not flat.is_contiguous():
            flat = flat.to(torch.bfloat16).contiguous()  # [M, K]
        if self._seen is not self.weight:
            _SEEN.append(self.weight)
            self._seen = self.weight
        y = torch.ops.zentorch.zentorch_dynamic_qlinear(flat, self.weight, self.scales, self.bias)  # [M, N]
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def check(layer: W8A8Linear, rows: tuple[int, ...] = _CHECK_ROWS) -> str | None:
    """None when `layer` computes its dequantized product closely and every row of a
    multi-row call equals that row alone, bit for bit; else what is wrong."""
    gen = torch.Generator().manual_seed(layer.out_features * 7 + layer.in_features)
    x = torch.randn(max(rows), layer.in_features, generator=gen).to(torch.bfloat16)  # [M, K]
    # The reference on a strided sample of output channels: a whole head in fp32 would be
    # 0.9 GB and seconds of load time.
    channels = slice(None, None, max(1, layer.out_features // _CHECK_CHANNELS))
    with torch.inference_mode():
        weight = layer.weight[channels].float() * layer.scales[channels, None]  # [n, K]
        reference = x.float() @ weight.T  # [M, n]
        if layer.bias is not None:
            reference = reference + layer.bias[channels].float()
        alone = [layer(x[i:i + 1]) for i in range(max(rows))]
        for m in rows:
            y = layer(x[:m])
            got, want = y[:, channels].float(), reference[:m]
            error = ((got - want).norm() / want.norm().clamp(min=1e-30)).item()
            if not error <= MAX_RELATIVE_ERROR:
                return f"{layer.out_features}x{layer.in_features}, {m} rows: relative error {error:.3f}"
            if not all(torch.equal(y[i], alone[i][0]) for i in range(m)):
                return f"{layer.out_features}x{layer.in_features}: a row of a {m}-row call differs from it alone"
    return None


def warm(layers: list[tuple[str, nn.Module]]) -> list[str]:
    """Check each named W8A8 layer (see `check`); the first call also makes the kernel build
    its cached copy of the weight now rather than in the first completion. Returns the
    problems found (empty: all good)."""
    problems = []
    for name, module in layers:
        if isinstance(module, W8A8Linear):
            problem = check(module)
            if problem:
                problems.append(f"{name}: {problem}")
    return problems
