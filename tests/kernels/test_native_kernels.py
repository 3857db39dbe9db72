"""The native kernels (lsp_server/kernels/native): the reference dequantizer against gguf's,
every variant this CPU runs against the scalar reference bit for bit, rows independent of M
and of the thread count, the error against the float product, and the refusals."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from lsp_server.kernels import native

needs_lib = pytest.mark.skipif(not native.available(), reason=native.why_unavailable())

ROOT = Path(__file__).resolve().parents[2]
NATIVE_DIR = ROOT / "lsp_server" / "kernels" / "native"
TYPES = sorted(native.TYPES)  # ggml ids: 2 Q4_0, 6 Q5_0, 8 Q8_0, 12 Q4_K, 14 Q6_K
BLOCK = {2: (32, 18), 6: (32, 22), 8: (32, 34), 12: (256, 144), 14: (256, 210)}  # values, bytes
FP16_FIELDS = {2: (0,), 6: (0,), 8: (0,), 12: (0, 2), 14: (208,)}  # byte offsets of fp16 scales in a block
# relative (Frobenius) error against the float64 product with the dequantized weights,
# measured 0.0053 (Q8_0), 0.0057 (Q5_0), 0.0077 (Q4_K), 0.0079 (Q6_K) on these inputs: the
# int8 activations (one scale per 32 or 256 values) are the whole error
REL_ERROR_BOUND = 0.02


def supported_variants() -> list[str]:
    return native.variants_supported() if native.available() else []


def random_weights(type_id: int, N: int, K: int, seed: int, realistic: bool = False) -> torch.Tensor:
    """[N, row_bytes] uint8: random bytes with finite fp16 scales (any finite half, subnormals
    included, or realistic magnitudes ~1e-3)."""
    rng = np.random.default_rng(seed)
    values, size = BLOCK[type_id]
    blocks = rng.integers(0, 256, size=(N * K // values, size), dtype=np.uint8)
    for offset in FP16_FIELDS[type_id]:
        if realistic:
            halves = (rng.standard_normal(len(blocks)) * 2e-3).astype(np.float16).view(np.uint16)
        else:  # sign, exponent 0..30, any mantissa: every finite half
            halves = ((rng.integers(0, 2, len(blocks)) << 15) | (rng.integers(0, 31, len(blocks)) << 10)
                      | rng.integers(0, 1024, len(blocks))).astype(np.uint16)
        blocks[:, offset:offset + 2] = halves.view(np.uint8).reshape(-1, 2)
    return torch.from_numpy(blocks.reshape(N, -1).copy())


def random_x(M: int, K: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g) * 3  # [M, K]
    if M > 1:
        x[1, :32] = 0  # an all-zero block
    if M > 2:
        x[2, :32] = torch.arange(32) * 1e-33  # below the tiny-block threshold
    if M > 3:
        x[3, ::7] *= 1e4  # a wide range within a block
    return x


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.fixture(autouse=True)
def restore_settings():
    if not native.available():
        yield
        return
    before_variant, before_threads = native.variant(), native.threads()
    yield
    native.set_variant(before_variant)
    native.set_threads(before_threads)


def run(variant: str, type_id: int, w: torch.Tensor, x: torch.Tensor, threads: int = 1) -> torch.Tensor:
    native.set_variant(variant)
    native.set_threads(threads)
    return native.matmul(type_id, w, x)


@needs_lib
@pytest.mark.parametrize("type_id", TYPES)
def test_dequantize_matches_gguf_bit_for_bit(type_id):
    K = BLOCK[type_id][0] * 6
    w = random_weights(type_id, 23, K, seed=type_id)
    ours = native.dequantize(type_id, w, K)  # [N, K]
    theirs = torch.from_numpy(gguf_dequantize(w.numpy(), GGMLQuantizationType(type_id)).copy())
    assert same_bits(ours, theirs)


@needs_lib
@pytest.mark.parametrize("variant", supported_variants())
@pytest.mark.parametrize("type_id", TYPES)
def test_every_variant_matches_the_scalar_reference_bit_for_bit(type_id, variant):
    qk = BLOCK[type_id][0]
    for K in ((qk * 3, qk * 11) if qk == 32 else (qk, qk * 3, qk * 11)):  # 11 blocks: 8 + a tail of 3
        w = random_weights(type_id, 37, K, seed=K + type_id)  # N = 37: not a multiple of the split
        for M in range(1, 18):
            x = random_x(M, K, seed=M)
            native.set_variant("scalar")
            ref_acts = native.quantize_activations(type_id, x)
            ref = native.matmul(type_id, w, x)
            native.set_variant(variant)
            assert torch.equal(native.quantize_activations(type_id, x), ref_acts), (K, M)
            assert same_bits(native.matmul(type_id, w, x), ref), (K, M)


@needs_lib
@pytest.mark.parametrize("variant", supported_variants())
@pytest.mark.parametrize("type_id", TYPES)
def test_rows_do_not_depend_on_the_row_count_or_threads(type_id, variant):
    K = 1024  # N * K spans more than one thread's share
    w = random_weights(type_id, 515, K, seed=7)
    x = random_x(9, K, seed=9)
    full = run(variant, type_id, w, x, threads=1)  # [9, 515]
    one_by_one = torch.cat([native.matmul(type_id, w, x[m:m + 1]) for m in range(9)])
    assert same_bits(full, one_by_one)
    for threads in (2, 3):
        assert same_bits(run(variant, type_id, w, x, threads=threads), full), threads


@needs_lib
@pytest.mark.parametrize("variant", supported_variants())
@pytest.mark.parametrize("type_id", sorted(native.REPACKED))
def test_k_quants_repacked_8_rows_by_8_give_the_plain_rows_bits(type_id, variant):
    for N, K in ((40, 256), (40, 768), (8, 2816), (520, 1024)):  # 520 rows: two threads' shares
        w = random_weights(type_id, N, K, seed=N + K)
        plain, packed = native.Weight(type_id, w, K, repack=False), native.Weight(type_id, w, K)
        assert (plain.type_id, packed.type_id) == (type_id, native.REPACKED[type_id])
        assert packed.weight.numel() == w.numel()  # the same bytes, rearranged
        for M in range(1, 18):
            x = random_x(M, K, seed=M)
            native.set_variant("scalar")
            ref = plain.matmul(x, torch.empty(M, N))
            native.set_variant(variant)
            for threads in (1, 2, 3):
                native.set_threads(threads)
                assert same_bits(packed.matmul(x, torch.empty(M, N)), ref), (N, K, M, threads)
            rows = torch.cat([packed.matmul(x[m:m + 1], torch.empty(1, N)) for m in range(M)])
            assert same_bits(rows, ref), (N, K, M)


@needs_lib
def test_back_to_back_threaded_calls_agree():
    w = random_weights(12, 600, 1024, seed=11, realistic=True)  # two threads' shares
    x = random_x(3, 1024, seed=2)
    first = run(native.variant(), 12, w, x, threads=2)
    assert all(same_bits(native.matmul(12, w, x), first) for _ in range(200))


@needs_lib
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_gets_a_fresh_pool():
    w = random_weights(12, 600, 1024, seed=11, realistic=True)
    x = random_x(3, 1024, seed=2)
    parent = run(native.variant(), 12, w, x, threads=2)  # the parent's workers exist now
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit status
        os._exit(0 if same_bits(native.matmul(12, w, x), parent) else 3)
    assert os.waitpid(pid, 0)[1] == 0


@needs_lib
@pytest.mark.parametrize("type_id", TYPES)
def test_close_to_the_float_product_with_the_dequantized_weights(type_id):
    K = 1024
    w = random_weights(type_id, 64, K, seed=3, realistic=True)
    x = torch.randn(5, K, generator=torch.Generator().manual_seed(5))  # [5, K]
    exact = x.double() @ native.dequantize(type_id, w, K).double().T  # [5, 64]
    for variant in supported_variants():
        y = run(variant, type_id, w, x)
        rel = ((y.double() - exact).norm() / exact.norm()).item()
        assert rel < REL_ERROR_BOUND, (variant, rel)


@needs_lib
@pytest.mark.parametrize("variant", supported_variants())
def test_a_nan_or_inf_in_a_row_reaches_only_that_rows_outputs(variant):
    K = 512
    for type_id in TYPES:
        w = random_weights(type_id, 5, K, seed=1, realistic=True)
        x = torch.randn(3, K)
        x[1, 7], x[2, 300] = float("nan"), float("inf")
        y = run(variant, type_id, w, x)  # [3, 5]
        assert torch.isfinite(y[0]).all() and torch.isnan(y[1:]).all(), type_id


@needs_lib
def test_a_variant_the_cpu_lacks_is_refused_naming_its_flags():
    missing = [v for v in native.VARIANTS if v not in supported_variants()]
    assert missing, "this CPU runs every variant: nothing to refuse"
    before = native.variant()
    for name in missing:
        with pytest.raises(ValueError) as info:
            native.set_variant(name)
        assert all(flag in str(info.value) for flag in native.NEEDS[name]), str(info.value)
        assert native.variant() == before
    with pytest.raises(ValueError, match="unknown kernel variant"):
        native.set_variant("sse9")


@needs_lib
def test_specfill_kernel_env_picks_the_variant_or_warns():
    def variant_under(value: str) -> subprocess.CompletedProcess:
        code = "import lsp_server.kernels.native as n; print(n.variant())"
        env = {**os.environ, "SPECFILL_KERNEL": value}
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)

    assert variant_under("scalar").stdout.strip() == "scalar"
    best = variant_under("auto").stdout.strip()
    assert best == supported_variants()[-1]
    missing = [v for v in native.VARIANTS if v not in supported_variants()]
    if missing:
        result = variant_under(missing[0])
        assert result.stdout.strip() == best and "ignored" in result.stderr


@needs_lib
def test_bad_shapes_and_tensors_are_refused():
    w = random_weights(12, 4, 512, seed=0)  # Q4_K [4, 288]
    with pytest.raises(ValueError, match="multiple"):
        native.matmul(12, w, torch.zeros(1, 500))
    with pytest.raises(ValueError, match="bytes"):
        native.matmul(12, w, torch.zeros(1, 768))
    with pytest.raises(ValueError, match="float32"):
        native.matmul(12, w, torch.zeros(1, 512, dtype=torch.float64))
    with pytest.raises(ValueError, match="contiguous"):
        native.matmul(12, w, torch.zeros(512, 2).T)
    with pytest.raises(ValueError, match="out must be"):
        native.matmul(12, w, torch.zeros(2, 512), out=torch.empty(2, 5))
    with pytest.raises(ValueError, match="not supported"):
        native.matmul(3, w, torch.zeros(1, 512))  # Q4_1
    with pytest.raises(ValueError, match="multiple"):
        native.dequantize(8, random_weights(8, 2, 64, seed=0), 48)
    with pytest.raises(ValueError, match="threads"):
        native.set_threads(-1)


@needs_lib
def test_out_is_written_in_place():
    w = random_weights(8, 6, 64, seed=0, realistic=True)
    x = torch.randn(3, 64)
    out = torch.full((3, 6), float("nan"))
    assert native.matmul(8, w, x, out=out) is out
    assert same_bits(out, native.matmul(8, w, x))


def build_selftest(cc: str, exe: Path) -> None:
    sources = [str(p) for p in sorted(NATIVE_DIR.glob("*.c")) if p.name != "pymodule.c"]
    build = subprocess.run(
        [cc, "-O2", "-Wall", "-ffp-contract=off", "-pthread", "-I", str(NATIVE_DIR),
         str(ROOT / "tests" / "kernels" / "native_selftest.c"), *sources, "-lm", "-o", str(exe)],
        capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr


def test_c_selftest_passes_for_every_variant(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler (cc) on PATH")
    exe = tmp_path / "native_selftest"
    build_selftest(cc, exe)
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.rstrip().endswith(" 0 failed"), result.stdout


def test_c_selftest_builds_and_passes_for_arm64_under_qemu(tmp_path):
    """The NEON (dotprod) variant, cross-compiled and run under qemu-user (its default CPU has
    the dot-product extension): bit for bit against the scalar reference, and each row's bits
    independent of the rows beside it, the thread count and the repacked layout, in another
    compiler's code generation. qemu says nothing of its speed."""
    cc, qemu = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("qemu-aarch64")
    if cc is None or qemu is None:
        reason = "no aarch64 cross compiler or qemu-user: run `make cross-deps`"
        if os.environ.get("SPECFILL_REQUIRE_EDITORS") == "1" or os.environ.get("CI"):
            pytest.fail(reason + " (CI: `make test` installs them)")
        pytest.skip(reason)
    exe = tmp_path / "native_selftest_arm64"
    build_selftest(cc, exe)
    result = subprocess.run([qemu, "-L", "/usr/aarch64-linux-gnu", str(exe)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.rstrip().endswith(" 0 failed"), result.stdout
    assert "variants run: scalar neon" in result.stdout


@needs_lib
def test_the_dot_product_peak_is_measured_for_each_vector_variant():
    assert native.dot_peak("scalar") == []  # the reference has no dot-product unit to measure
    for variant in supported_variants():
        if variant == "scalar":
            continue
        rates = native.dot_peak(variant, seconds=0.01)
        assert len(rates) == 2 and all(rate > 1.0 for _, rate in rates), (variant, rates)
    lacking = [v for v in native.VARIANTS if v not in supported_variants()]
    assert all(native.dot_peak(v) == [] for v in lacking)


@needs_lib
def test_the_plain_read_reads_every_byte():
    data = random_weights(12, 600, 1024, seed=4)  # two threads' shares, a partial last chunk
    odd = torch.from_numpy(np.arange(4104, dtype=np.uint8))  # not a whole number of 64-byte words
    expected = int(np.bitwise_xor.reduce(data.numpy().reshape(-1).view(np.uint64)))
    native.set_threads(2)
    assert native.read_bytes([data]) == expected
    assert native.read_bytes([data, odd]) == expected ^ int(np.bitwise_xor.reduce(odd.numpy().view(np.uint64)))
