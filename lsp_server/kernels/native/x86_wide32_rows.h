/* wide32_rows for the ISA header that includes this after defining SF_WIDE32_R and its
 * wide32_rows_r (x86_wide_q4_0.h, avx2_wide_q4_0.h): the passes of x86_wide_shared.h's
 * SF_WIDE_PASSES; and the kernels' table entries. */
#ifndef SF_X86_WIDE32_ROWS_H
#define SF_X86_WIDE32_ROWS_H

static void wide32_rows(const sf_wide_block_32 *t, int64_t nb, const uint8_t *xq, size_t xrb, const int32_t *xs,
                        int64_t M, float *y, int64_t ldy) {
    SF_WIDE_PASSES(wide32_rows_r, SF_WIDE32_R)
}

#undef SF_X86_WIDE32_OPS
#define SF_X86_WIDE32_OPS .wide32_tile = wide32_tile, .wide32_rows = wide32_rows

#endif /* SF_X86_WIDE32_ROWS_H */
