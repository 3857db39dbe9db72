/* The wide products of Q4_0_X8 matrices on AVX-512 VNNI (blocks.h sf_wide_block_32),
 * included by avx512.c after x86_wide.h: bit for bit ref.c's ref_wide32_rows, and so the
 * repacked kernels' rows_q4_0_x8. A tile block holds quad j of 32 weight rows' nibbles in
 * two zmm; each activation row meets them with its 4 bytes broadcast (vpdpbusd, nibble as
 * the unsigned operand), its sums starting from xoff (the -8). Against the repacked
 * kernels, which unpack each block again for every pass of up to 8 rows and spend a second
 * vpdpbusd a quad on the offset, a block's integer work is 16 vpdpbusd a row for 32 weight
 * rows, and its float step (sf_q32_term) covers 16 weight rows an instruction. */
#ifndef SF_X86_WIDE_Q4_0_H
#define SF_X86_WIDE_Q4_0_H

/* Activation rows a pass: 2R int32 sums, 2R float lanes, 2 weights and a broadcast of 32
 * registers. R = 5, 6, 7 were the same within noise (one thread, the draft's gate/up and
 * down at 512 rows, AMD EPYC Zen 4: 148-158 GMAC/s, interleaved), as was asking L1 for the
 * lane's next block; ~80 % of the peak is the ceiling here: a block's 16 vpdpbusd a row share
 * the multiply pipes with its float step's 4 multiplies. */
#define SF_WIDE32_R 6

/* The float lanes (lane b % 8 of block b) one at a time: lane l's blocks l, l + 8, ... add in
 * k order, as in the reference, into registers; the 8 lanes then fold as sf_lanes8_sum. */
SF_ALWAYS_INLINE void wide32_rows_r(const sf_wide_block_32 *t, int64_t nb, const uint8_t *xq, size_t xrb,
                                    const int32_t *xoff, float *y, int64_t ldy, const int R) {
    _Alignas(64) float lanes[8][SF_WIDE32_R][SF_WIDE_ROWS];
    const sf_act_32 *x[SF_WIDE32_R];
    for (int r = 0; r < R; r++) x[r] = (const sf_act_32 *)(xq + (size_t)r * xrb);
    for (int l = 0; l < 8; l++) {
        __m512 ya[SF_WIDE32_R], yb[SF_WIDE32_R];
        for (int r = 0; r < R; r++) ya[r] = yb[r] = _mm512_setzero_ps();
        for (int64_t i = l; i < nb; i += 8) {
            __m512i aa[SF_WIDE32_R], ab[SF_WIDE32_R];
            for (int r = 0; r < R; r++) aa[r] = ab[r] = _mm512_set1_epi32(xoff[r * nb + i]);
            const uint8_t *q = &t[i].q[0][0][0];
            for (int j = 0; j < SF_QK32 / 4; j++, q += 4 * SF_WIDE_ROWS) {
                const __m512i wa = _mm512_load_si512((const void *)q), wb = _mm512_load_si512((const void *)(q + 64));
                for (int r = 0; r < R; r++) {
                    int32_t four;
                    memcpy(&four, x[r][i].qs + 4 * j, 4);
                    const __m512i xb = _mm512_set1_epi32(four);
                    aa[r] = _mm512_dpbusd_epi32(aa[r], wa, xb);
                    ab[r] = _mm512_dpbusd_epi32(ab[r], wb, xb);
                }
            }
            const __m512 da = _mm512_load_ps(t[i].d), db = _mm512_load_ps(t[i].d + 16);
            for (int r = 0; r < R; r++) {  /* sf_q32_term: (d_w * d_x) * (float)isum */
                const __m512 xd = _mm512_set1_ps(x[r][i].d);
                ya[r] = _mm512_add_ps(ya[r], _mm512_mul_ps(_mm512_mul_ps(da, xd), _mm512_cvtepi32_ps(aa[r])));
                yb[r] = _mm512_add_ps(yb[r], _mm512_mul_ps(_mm512_mul_ps(db, xd), _mm512_cvtepi32_ps(ab[r])));
            }
        }
        for (int r = 0; r < R; r++) {
            _mm512_store_ps(lanes[l][r], ya[r]);
            _mm512_store_ps(lanes[l][r] + 16, yb[r]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int h = 0; h < SF_WIDE_ROWS; h += 16) {  /* sf_lanes8_sum, 16 weight rows at once */
#define SF_LANE(l) _mm512_load_ps(lanes[l][r] + h)
            const __m512 s0 = _mm512_add_ps(SF_LANE(0), SF_LANE(4)), s1 = _mm512_add_ps(SF_LANE(1), SF_LANE(5));
            const __m512 s2 = _mm512_add_ps(SF_LANE(2), SF_LANE(6)), s3 = _mm512_add_ps(SF_LANE(3), SF_LANE(7));
#undef SF_LANE
            _mm512_storeu_ps(y + r * ldy + h, _mm512_add_ps(_mm512_add_ps(s0, s2), _mm512_add_ps(s1, s3)));
        }
}

#include "x86_wide32_rows.h"

#endif /* SF_X86_WIDE_Q4_0_H */
