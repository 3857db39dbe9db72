"""Choosing int8 / int4 codes, scales and zeros for a weight matrix; pure tensor maths.

- int8, symmetric per output channel: w ~= q * scale, q in -128..127.
- int4, asymmetric per group of `group_size` consecutive inputs ("tinygemm" convention,
  what torch's CPU int4 kernel computes): w ~= (q - 8) * scale + zero, q in 0..15.

Scales and zeros are stored in bf16 (the kernels take them in the activation dtype), so
codes are always chosen for the bf16-rounded values the kernel will really use.

The default models come from GGUF Q4_K_M files: most of their tensors were stored as Q4_K,
whose 32-weight sub-blocks hold 16 evenly spaced values. Plain min/max int4 puts its own
16 levels between the group's extremes and misses that grid when a group doesn't use both
end codes (about a fifth of them use 0..14); trying range/14 and range/13 as well finds
the grid again, and one least-squares refit of scale and zero undoes most of the bf16
rounding. On the default target this takes Q4_K tensors from 4.5% relative error (min/max)
to 0.25%, better than int8's 1.4%; tensors that were Q6_K / Q5_0 / Q8_0 stay near 7%.
"""

from __future__ import annotations

import torch

# A group counts as "on a 4-bit grid" when its mean squared error is below this share of
# (range / 15)**2. Rounding data that is not on such a grid gives about 1/12; the Q4_K
# groups of the default GGUF models land at 2e-4 (median) to 2e-3 (the bf16 rounding of
# scale and zero).
_ON_GRID = 3e-3
# Steps tried, as range / levels. Q4_K groups used range / 15 (79%) or range / 14 (21%);
# 13 was never the best but is cheap insurance.
_GRID_LEVELS = (15, 14, 13)
_CHUNK_ELEMENTS = 1 << 22  # rows are fitted in chunks to bound temporary memory (~100 MB)


def _to_bf16_values(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


# --- int8 -------------------------------------------------------------------------------


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [N, K] -> (q [N, K] int8, scales [N] bf16) with weight ~= q * scales[:, None]."""
    w = weight.detach().float()
    scales = _to_bf16_values((w.abs().amax(dim=1) / 127.0).clamp(min=1e-8))  # [N]
    q = torch.round(w / scales[:, None]).clamp(-128, 127).to(torch.int8)  # [N, K]
    return q, scales.to(torch.bfloat16)


def dequantize_int8(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The fp32 weight [N, K] the int8 kernel computes with."""
    return q.float() * scales.float()[:, None]


# --- int4 -------------------------------------------------------------------------------


def _int4_codes(x: torch.Tensor, s: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return (torch.round((x - z) / s) + 8).clamp(0, 15)


def _group_error(x: torch.Tensor, s: torch.Tensor, z: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """Mean squared error of each group [R, 1], relative to (range / 15)**2."""
    mse = ((_int4_codes(x, s, z) - 8) * s + z - x).square().mean(-1, keepdim=True)
    return mse / (span / 15).square().clamp(min=1e-30)


def _grid_candidate(lo: torch.Tensor, span: torch.Tensor, levels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero putting code 0 at the group's minimum and code `levels` at its maximum."""
    s = _to_bf16_values((span / levels).clamp(min=1e-8))
    return s, _to_bf16_values(lo + 8 * s)


def _least_squares_refit(x: torch.Tensor, s: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero of the least-squares line through (code - 8, x) for the current codes."""
    c = _int4_codes(x, s, z) - 8
    c_mean, x_mean = c.mean(-1, keepdim=True), x.mean(-1, keepdim=True)
    var = (c - c_mean).square().mean(-1, keepdim=True)
    slope = ((c - c_mean) * (x - x_mean)).mean(-1, keepdim=True) / var.clamp(min=1e-12)
    new_s = torch.where(var > 0, slope, s).clamp(min=1e-8)  # a constant group keeps its scale
    return _to_bf16_values(new_s), _to_bf16_values(x_mean - new_s * c_mean)


def _fit_int4_groups(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Scale and zero [R, 1] (bf16 values in fp32) for each group (row) of x [R, g]."""
    lo, hi = x.amin(-1, keepdim=True), x.amax(-1, keepdim=True)
    span = hi - lo
    s, z = _grid_candidate(lo, span, _GRID_LEVELS[0])
    err = _group_error(x, s, z, span)
    for levels in _GRID_LEVELS[1:]:
        todo = (err[:, 0] > _ON_GRID).nonzero()[:, 0]  # only groups not yet on a grid
        if todo.numel() == 0:
            break
        cs, cz = _grid_candidate(lo[todo], span[todo], levels)
        cerr = _group_error(x[todo], cs, cz, span[todo])
        better = cerr < err[todo]
        s[todo], z[todo] = torch.where(better, cs, s[todo]), torch.where(better, cz, z[todo])
        err[todo] = torch.where(better, cerr, err[todo])
    rs, rz = _least_squares_refit(x, s, z)
    better = _group_error(x, rs, rz, span) < err
    return torch.where(better, rs, s), torch.where(better, rz, z)


def quantize_int4(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [N, K] -> (codes [N, K] int32 in 0..15, scales_and_zeros [K/g, N, 2] bf16)."""
    n, k = weight.shape
    groups = k // group_size
    codes = torch.empty(n, k, dtype=torch.int32)
    scales = torch.empty(n, groups, dtype=torch.bfloat16)
    zeros = torch.empty(n, groups, dtype=torch.bfloat16)
    rows = max(1, _CHUNK_ELEMENTS // k)
    for r in range(0, n, rows):
        x = weight[r:r + rows].detach().float().reshape(-1, group_size)  # [R * G, g]
        s, z = _fit_int4_groups(x)  # [R * G, 1]
        codes[r:r + rows] = _int4_codes(x, s, z).to(torch.int32).reshape(-1, k)
        scales[r:r + rows] = s.reshape(-1, groups).to(torch.bfloat16)
        zeros[r:r + rows] = z.reshape(-1, groups).to(torch.bfloat16)
    scales_and_zeros = torch.stack([scales, zeros], dim=-1).transpose(0, 1).contiguous()  # [G, N, 2]
    return codes, scales_and_zeros


def dequantize_int4(codes: torch.Tensor, scales_and_zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    """The fp32 weight [N, K] the int4 kernel computes with."""
    n, k = codes.shape
    sz = scales_and_zeros.float().transpose(0, 1)  # [N, G, 2]
    grouped = codes.float().reshape(n, k // group_size, group_size) - 8.0  # [N, G, g]
    return (grouped * sz[..., 0:1] + sz[..., 1:2]).reshape(n, k)


def relative_error(weight: torch.Tensor, restored: torch.Tensor) -> float:
    """||restored - weight|| / ||weight||."""
    w = weight.detach().float()
    return ((restored - w).norm() / w.norm().clamp(min=1e-30)).item()
