"""The kernels' wide path (native.set_wide_rows): products of many rows, as a prefill has, on
tiles of 32 weight rows quantized again to int8. Bit for bit the reference's on every variant
that has it; close to the float product; never taken below the threshold, for a type it
lacks or for N not a multiple of 32, so verifies keep the repacked kernels' bits. Q4_0's own
wide path (native.set_wide_rows_q4_0) keeps the weights' nibbles: the repacked kernels' bits."""

from __future__ import annotations

import pytest
import torch

from lsp_server.kernels import native
from tests.kernels.test_native_kernels import (REL_ERROR_BOUND, needs_lib, random_weights, random_x, same_bits,
                                               supported_variants)

Q4_0, Q4_K, Q6_K = 2, 12, 14


@pytest.fixture(autouse=True)
def restore_wide():
    if not native.available():
        yield
        return
    before = native.variant(), native.threads(), native.wide_rows(), native.wide_rows_q4_0()
    yield
    native.set_variant(before[0])
    native.set_threads(before[1])
    native.set_wide_rows(before[2])
    native.set_wide_rows_q4_0(before[3])


def wide_variants() -> list[str]:
    return [v for v in supported_variants() if native.has_wide(v)]


def product(weight: native.Weight, x: torch.Tensor, variant: str, wide_from: int, threads: int = 1) -> torch.Tensor:
    native.set_variant(variant)
    native.set_threads(threads)
    native.set_wide_rows(wide_from)
    native.set_wide_rows_q4_0(wide_from)
    return weight.matmul(x, torch.empty(x.shape[0], weight.N))


@needs_lib
def test_the_reference_has_the_wide_path_and_avx2_avx512_where_they_run():
    assert native.has_wide("scalar")
    for variant in ("avx2", "avx512"):
        if variant in supported_variants():
            assert native.has_wide(variant)


@needs_lib
@pytest.mark.parametrize("variant", wide_variants())
@pytest.mark.parametrize("type_id", [Q4_K, Q6_K])
def test_every_wide_variant_matches_the_reference_bit_for_bit(type_id, variant):
    for N, K in ((32, 256), (96, 768), (64, 2816)):
        w = native.Weight(type_id, random_weights(type_id, N, K, seed=N + K), K)
        for M in (1, 5, 6, 7, 8, 9, 12, 13, 40):  # every tail (1-5 rows) of AVX2's and AVX-512's 6-row passes
            x = random_x(M, K, seed=M)
            ref = product(w, x, "scalar", 1)
            for threads in (1, 2, 3):
                assert same_bits(product(w, x, variant, 1, threads), ref), (N, K, M, threads)


@needs_lib
@pytest.mark.parametrize("variant", wide_variants())
def test_wide_rows_do_not_depend_on_the_other_rows(variant):
    K, N = 1536, 256
    w = native.Weight(Q4_K, random_weights(Q4_K, N, K, seed=2, realistic=True), K)
    x = random_x(70, K, seed=3)
    full = product(w, x, variant, 1, threads=2)
    rows = torch.cat([product(w, x[m:m + 1], variant, 1) for m in range(0, 70, 9)])
    assert same_bits(rows, full[::9])


@needs_lib
@pytest.mark.parametrize("type_id", [Q4_K, Q6_K])
def test_wide_products_stay_close_to_the_float_product(type_id):
    K, N = 1024, 64
    raw = random_weights(type_id, N, K, seed=3, realistic=True)
    w = native.Weight(type_id, raw, K)
    x = torch.randn(20, K, generator=torch.Generator().manual_seed(5))
    exact = x.double() @ native.dequantize(type_id, raw, K).double().T  # [20, N]
    for variant in wide_variants():
        rel = ((product(w, x, variant, 1).double() - exact).norm() / exact.norm()).item()
        assert rel < REL_ERROR_BOUND, (variant, rel)


@needs_lib
def test_below_the_threshold_and_where_it_does_not_fit_the_repacked_kernels_run():
    variant = native.variant()
    K = 512
    for type_id, N in ((Q4_K, 64), (Q6_K, 64), (Q4_K, 40)):  # 40 rows: not whole tiles
        w = native.Weight(type_id, random_weights(type_id, N, K, seed=N, realistic=True), K)
        x = random_x(20, K, seed=1)
        exact_path = product(w, x, variant, 0)
        assert same_bits(product(w, x, variant, 21), exact_path)  # 20 rows < 21
        wide = product(w, x, variant, 20)
        if N % 32 or not native.has_wide(variant):
            assert same_bits(wide, exact_path)
        else:
            assert not same_bits(wide, exact_path)  # the tile's rounding differs


@needs_lib
@pytest.mark.parametrize("variant", wide_variants())
def test_a_nan_in_an_activation_row_reaches_only_that_rows_outputs(variant):
    K = 512
    w = native.Weight(Q6_K, random_weights(Q6_K, 32, K, seed=4, realistic=True), K)
    x = torch.randn(3, K)
    x[1, 7], x[2, 300] = float("nan"), float("inf")
    y = product(w, x, variant, 1)
    assert torch.isfinite(y[0]).all() and torch.isnan(y[1:]).all()


@needs_lib
def test_a_bad_threshold_is_refused():
    with pytest.raises(ValueError, match="wide rows"):
        native.set_wide_rows(-1)
    with pytest.raises(ValueError, match="wide rows"):
        native.set_wide_rows_q4_0(-1)


@needs_lib
@pytest.mark.parametrize("variant", wide_variants())
@pytest.mark.parametrize("type_id", [Q4_K, Q6_K])
def test_infinite_and_nan_weight_scales_give_the_references_bits(type_id, variant):
    K, N = 512, 32
    raw = random_weights(type_id, N, K, seed=6, realistic=True)
    d_at = 0 if type_id == Q4_K else 208  # the block's fp16 d
    block = 144 if type_id == Q4_K else 210
    for row, half in ((3, 0x7C00), (17, 0x7E00), (30, 0xFC00)):  # +inf, NaN, -inf in one super-block
        raw[row, block + d_at:block + d_at + 2] = torch.tensor([half & 0xFF, half >> 8], dtype=torch.uint8)
    w = native.Weight(type_id, raw, K)
    x = random_x(9, K, seed=2)
    ref = product(w, x, "scalar", 1)
    assert not torch.isfinite(ref[:, 3]).any() and torch.isfinite(ref[:, 0]).all()
    assert same_bits(product(w, x, variant, 1), ref)


@needs_lib
@pytest.mark.parametrize("variant", ["scalar"] + wide_variants())
def test_q4_0_wide_products_are_the_repacked_kernels_bits(variant):
    """The draft's shapes (K = 896 and 4864: not multiples of 256), one block, and every tail
    of the 3-row (AVX2) and 6-row (AVX-512) passes."""
    for N, K in ((32, 32), (64, 896), (32, 4864)):
        w = native.Weight(Q4_0, random_weights(Q4_0, N, K, seed=N + K), K)
        for M in (1, 4, 5, 6, 7, 11, 13, 40):
            x = random_x(M, K, seed=M)
            repacked = product(w, x, "scalar", 0)
            for threads in (1, 2, 3):
                assert same_bits(product(w, x, variant, 1, threads), repacked), (N, K, M, threads)


@needs_lib
def test_the_q4_0_threshold_is_its_own():
    native.set_wide_rows(0)
    native.set_wide_rows_q4_0(32)
    assert (native.wide_rows(), native.wide_rows_q4_0()) == (0, 32)
    native.set_wide_rows(64)
    assert (native.wide_rows(), native.wide_rows_q4_0()) == (64, 32)


@needs_lib
@pytest.mark.parametrize("variant", wide_variants())
def test_q4_0_wide_infinite_and_nan_scales_and_activations_give_the_repacked_bits(variant):
    K, N = 896, 32
    raw = random_weights(Q4_0, N, K, seed=7, realistic=True)
    for row, block, half in ((3, 0, 0x7C00), (17, 5, 0x7E00), (30, 27, 0xFC00)):  # +inf, NaN, -inf d
        raw[row, 18 * block:18 * block + 2] = torch.tensor([half & 0xFF, half >> 8], dtype=torch.uint8)
    w = native.Weight(Q4_0, raw, K)
    x = random_x(9, K, seed=2)
    x[4, 100], x[6, 800] = float("nan"), float("inf")
    repacked = product(w, x, "scalar", 0)
    assert not torch.isfinite(repacked[:, 3]).any() and torch.isnan(repacked[4]).all()
    assert same_bits(product(w, x, variant, 1), repacked)
