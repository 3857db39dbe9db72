"""Speed of the native kernels (lsp_server/kernels/native) over a 1.5B Qwen2 target's matrices.

    specfill bench kernels [--rows 1,2,3,5,9,13,16] [--passes 5] [--variants avx2] [--model draft]

Distinct random Q4_K weights shaped like the target's 28 layers (fused qkv [2048, 1536],
o [1536, 1536], fused gate/up [17920, 1536], down [1536, 8960]) plus a Q6_K head
[151936, 1536]: ~0.93 GB, far beyond any cache, so every pass streams the weights from DRAM
as a decode step does. Times whole passes (median of --passes after one warm-up) for each
row count M and each variant, and prints ms per pass, the ratio to M = 1, the bytes/s of the
weights and the products' GMAC/s (int8 multiply-adds) as a share of the peak.

The peak is this machine's own: a micro-benchmark of the variant's dot-product instruction
on registers (vpdpbusd zmm / ymm on avx512; maddubs + add, and maddubs + madd + add, on
avx2), one thread's rate times the threads (on a shared machine the threads-at-once rate is
lower and printed beside it). The one-row pass, which streams the weights, is set against a
plain read of the same bytes (--passes of it, median). The scalar reference is ~40x slower
than AVX2, so by default it runs M = 1 only (--scalar-rows). Where the variant has the wide
path (native.set_wide_rows: a prefill's many rows on int8 tiles shared by every row), its
rows (--wide-rows) follow, every product on it. --compare-pages times the --rows products
with the weights in 4 KB pages against huge pages (kernels/huge_pages.py) instead.

--model draft: the 0.5B draft's 24 layers instead, as the engine holds them (requantized to
Q4_0 at load: qkv [1152, 896], o [896, 896], gate_up [9728, 896], down [896, 4864], ~0.2 GB;
its head is left out), their wide rows on Q4_0's own wide path (native.set_wide_rows_q4_0)."""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from unittest import mock

import numpy as np
import torch

from lsp_server.kernels import cpu, huge_pages, native

Q4_0, Q4_K, Q6_K = 2, 12, 14
LAYERS = 28
LAYER_SHAPES = (("qkv", 2048, 1536), ("o", 1536, 1536), ("gate_up", 17920, 1536), ("down", 1536, 8960))
HEAD_SHAPE = ("head", 151936, 1536)
DRAFT_LAYERS = 24
DRAFT_SHAPES = (("qkv", 1152, 896), ("o", 896, 896), ("gate_up", 9728, 896), ("down", 896, 4864))
FP16_FIELDS = {Q4_0: (0,), Q4_K: (0, 2), Q6_K: (208,)}  # byte offsets of d (and dmin) in a block
BLOCK_BYTES = {Q4_0: 18, Q4_K: 144, Q6_K: 210}
BLOCK_VALUES = {Q4_0: 32, Q4_K: 256, Q6_K: 256}


@dataclass
class Matrix:
    name: str
    type_id: int
    N: int
    K: int
    kernel: native.Weight  # checked and repacked once, as the engine holds it (the only copy)


def random_matrix(name: str, type_id: int, N: int, K: int, rng: np.random.Generator) -> Matrix:
    """Random blocks with realistic fp16 scales (speed does not depend on the values)."""
    blocks = rng.integers(0, 256, size=(N * K // BLOCK_VALUES[type_id], BLOCK_BYTES[type_id]), dtype=np.uint8)
    for offset in FP16_FIELDS[type_id]:
        halves = (np.abs(rng.standard_normal(len(blocks))) * 1e-3).astype(np.float16)
        blocks[:, offset:offset + 2] = halves.view(np.uint8).reshape(-1, 2)
    return Matrix(name, type_id, N, K, native.Weight(type_id, torch.from_numpy(blocks.reshape(N, -1)), K))


def build_model(seed: int = 0, model: str = "target") -> list[Matrix]:
    rng = np.random.default_rng(seed)
    if model == "draft":
        return [random_matrix(f"{name}.{layer}", Q4_0, N, K, rng)
                for layer in range(DRAFT_LAYERS) for name, N, K in DRAFT_SHAPES]
    mats = [random_matrix(f"{name}.{layer}", Q4_K, N, K, rng)
            for layer in range(LAYERS) for name, N, K in LAYER_SHAPES]
    mats.append(random_matrix(HEAD_SHAPE[0], Q6_K, HEAD_SHAPE[1], HEAD_SHAPE[2], rng))
    return mats


def time_passes(mats: list[Matrix], M: int, passes: int) -> float:
    """Median ms of a pass over every matrix with M activation rows."""
    xs = {K: torch.randn(M, K) for K in {m.K for m in mats}}  # [M, K]
    outs = [torch.empty(M, m.N) for m in mats]  # [M, N]
    times = []
    for i in range(passes + 1):  # the first is a warm-up
        start = time.perf_counter()
        for mat, out in zip(mats, outs):
            mat.kernel.matmul(xs[mat.K], out)
        if i:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def peak_gmacs(variant: str) -> float:
    """The variant's dot-product peak for the threads in use: the best form's one-thread rate
    times the threads, or its all-threads rate where that is higher; 0 where it has none.
    Prints both rates of each form."""
    threads = native.threads()
    native.set_threads(1)
    one = native.dot_peak(variant)
    native.set_threads(threads)
    every = dict(native.dot_peak(variant))
    for form, rate in one:
        print(f"  {variant} peak, {form}: {rate:.0f} GMAC/s a thread, {every[form]:.0f} on {threads} at once")
    return max((max(rate * threads, every[form]) for form, rate in one), default=0.0)


def read_gb_per_s(mats: list[Matrix], passes: int) -> float:
    """A plain read of every matrix's weights (native.read_bytes), median GB/s of `passes`."""
    weights = [m.kernel.weight for m in mats]
    total = sum(w.numel() for w in weights)
    times = []
    for _ in range(passes + 1):  # the first is a warm-up
        start = time.perf_counter()
        native.read_bytes(weights)
        times.append(time.perf_counter() - start)
    return total / statistics.median(times[1:]) / 1e9


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", default="1,2,3,5,9,13,16", help="activation row counts M")
    parser.add_argument("--scalar-rows", default="1", help="row counts for the (slow) scalar reference; empty: skip it")
    parser.add_argument("--passes", type=int, default=5, help="timed passes per M (median)")
    parser.add_argument("--wide-rows", default="64,256,512",
                        help="row counts for the wide path (a prefill's products: native.set_wide_rows) where the "
                             "variant has it; empty: skip it")
    parser.add_argument("--variants", default="", help="comma-separated; default: all this CPU runs")
    parser.add_argument("--threads", type=int, default=0, help="0 = the CPUs of the affinity mask")
    parser.add_argument("--compare-pages", action="store_true",
                        help="time the --rows products with the weights in 4 KB pages and in huge pages "
                             "(kernels/huge_pages.py), the two alternating, and nothing else")
    parser.add_argument("--model", choices=("target", "draft"), default="target",
                        help="the 1.5B target's matrices (Q4_K, a Q6_K head) or the 0.5B draft's layers (Q4_0)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    if not native.available():
        print(native.why_unavailable())
        return 1
    native.set_threads(args.threads)
    variants = args.variants.split(",") if args.variants else native.variants_supported()[::-1]
    print(f"CPU: {cpu.describe()}\nthreads: {native.threads()}")
    if args.compare_pages:
        native.set_variant(variants[0])
        compare_pages([int(r) for r in args.rows.split(",") if r], args.passes, args.model)
        return 0
    start = time.perf_counter()
    mats = build_model(model=args.model)
    total = sum(m.kernel.weight.numel() for m in mats)
    print(f"{len(mats)} matrices, {total / 1e9:.2f} GB of weights (built in {time.perf_counter() - start:.0f} s)")
    read = read_gb_per_s(mats, args.passes)
    print(f"plain read of those weights: {read:.1f} GB/s\n")
    for variant in variants:
        native.set_variant(variant)
        time_variant(variant, mats, args, read)
    return 0


def time_variant(variant: str, mats: list[Matrix], args: argparse.Namespace, read: float) -> None:
    """One variant's rows: ms a pass, x M = 1, GB/s (and % of the plain read), GMAC/s (and % of peak)."""
    peak = peak_gmacs(variant)
    total = sum(m.kernel.weight.numel() for m in mats)
    macs = sum(m.N * m.K for m in mats)  # a pass of one row
    print(f"{'variant':<8} {'M':>3} {'ms/pass':>9} {'x M=1':>7} {'GB/s':>6} {'%read':>6} {'GMAC/s':>7} {'%peak':>6}")
    rows = [int(r) for r in (args.scalar_rows if variant == "scalar" else args.rows).split(",") if r]
    base = None

    def line(label: str, M: int, ms: float) -> None:
        gbs, gmacs = total / ms / 1e6, macs * M / ms / 1e6
        share = f"{100 * gmacs / peak:>5.0f}%" if peak else f"{'-':>6}"
        print(f"{label:<8} {M:>3} {ms:>9.1f} {ms / base:>7.2f} {gbs:>6.1f} {100 * gbs / read:>5.0f}% {gmacs:>7.1f} {share}",
              flush=True)

    for M in rows:
        ms = time_passes(mats, M, 1 if variant == "scalar" else args.passes)
        base = base or ms
        line(variant, M, ms)
    wide = [int(r) for r in args.wide_rows.split(",") if r] if variant != "scalar" and native.has_wide(variant) else []
    for M in wide:  # every product of M rows on the wide path, as a prefill's feeds take it
        native.set_wide_rows(1)
        native.set_wide_rows_q4_0(1)
        try:
            ms = time_passes(mats, M, args.passes)
        finally:
            native.set_wide_rows(0)
            native.set_wide_rows_q4_0(0)
        base = base or ms
        line("  wide", M, ms)
    print()


PAGE_ROUNDS = 4


def compare_pages(rows: list[int], passes: int, model: str = "target") -> None:
    """The products of every matrix from two copies of the same weights, one in 4 KB pages
    (plain torch.empty) and one where huge_pages.py puts them, the two alternating by round
    (this machine drifts: only an interleaved ratio means anything)."""
    copies = {}
    for label, setting in (("4 KB pages", "0"), ("huge pages", "1")):
        before = huge_pages.huge_bytes()
        with mock.patch.dict(os.environ, {huge_pages.ENV: setting}):
            copies[label] = build_model(model=model)
        after = huge_pages.huge_bytes()
        held = "not reported here" if None in (before, after) else f"{(after - before) / 1e9:.2f} GB"
        print(f"{label}: {len(copies[label])} matrices; in huge pages: {held}")
    times: dict[tuple[str, int], list[float]] = {(label, M): [] for label in copies for M in rows}
    for r in range(PAGE_ROUNDS):
        for label in (list(copies) if r % 2 == 0 else list(copies)[::-1]):
            for M in rows:
                times[(label, M)].append(time_passes(copies[label], M, passes))
    print(f"variant {native.variant()}, {PAGE_ROUNDS} rounds, medians of ms a pass")
    print(f"{'M':>3} {'4 KB pages':>11} {'huge pages':>11} {'huge / 4 KB':>12} {'rounds':>13}")
    for M in rows:
        small, huge = times[("4 KB pages", M)], times[("huge pages", M)]
        per_round = sorted(h / s for h, s in zip(huge, small))
        print(f"{M:>3} {statistics.median(small):>11.1f} {statistics.median(huge):>11.1f} "
              f"{statistics.median(huge) / statistics.median(small):>12.3f} "
              f"{per_round[0]:>6.3f}-{per_round[-1]:.3f}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
