/* wide32_rows for the ISA header that includes this after defining SF_WIDE32_R and its
 * wide32_rows_r (x86_wide_q4_0.h, avx2_wide_q4_0.h): passes of SF_WIDE32_R activation rows,
 * then one pass of the rest; and the kernels' table entries. */
#ifndef SF_X86_WIDE32_ROWS_H
#define SF_X86_WIDE32_ROWS_H

static void wide32_rows(const sf_wide_block_32 *t, int64_t nb, const uint8_t *xq, size_t xrb, const int32_t *xoff,
                        int64_t M, float *y, int64_t ldy) {
    int64_t m = 0;
    for (; m + SF_WIDE32_R <= M; m += SF_WIDE32_R)
        wide32_rows_r(t, nb, xq + (size_t)m * xrb, xrb, xoff + m * nb, y + m * ldy, ldy, SF_WIDE32_R);
    const uint8_t *x = xq + (size_t)m * xrb;
    const int32_t *xo = xoff + m * nb;
    /* the last M % R rows: a pass of their own count (each case below R compiles once) */
#define SF_WIDE32_REST(n)                                                                                   \
    case n:                                                                                                 \
        if ((n) < SF_WIDE32_R) wide32_rows_r(t, nb, x, xrb, xo, y + m * ldy, ldy, (n) < SF_WIDE32_R ? (n) : 1); \
        break;
    switch (M - m) {
        SF_WIDE32_REST(1) SF_WIDE32_REST(2) SF_WIDE32_REST(3) SF_WIDE32_REST(4) SF_WIDE32_REST(5)
        SF_WIDE32_REST(6) SF_WIDE32_REST(7) SF_WIDE32_REST(8) SF_WIDE32_REST(9) SF_WIDE32_REST(10)
        SF_WIDE32_REST(11)
    default: break;
    }
#undef SF_WIDE32_REST
}

#undef SF_X86_WIDE32_OPS
#define SF_X86_WIDE32_OPS .wide32_tile = wide32_tile, .wide32_rows = wide32_rows

#endif /* SF_X86_WIDE32_ROWS_H */
