/* The wide products of Q4_0_X8 matrices on AVX2 (blocks.h sf_wide_block_32), included by
 * avx2.c after avx2_wide.h: bit for bit ref.c's ref_wide32_rows, and so the repacked
 * kernels' rows_q4_0_x8. The tile's nibbles (0..15) are vpmaddubsw's unsigned operand as
 * they stand: a pair is at most 2 * 15 * 127 = 3810, so the 8 quads of a block add up in
 * int16 without saturating (8 * 3810 = 30480), and one vpmaddwd with ones a block and 8
 * weight rows widens them (AVX2 has no u8 x s8 dot product into int32; the Q4_K tiles' int8
 * values needed int16 products, avx2_wide.h, these do not). */
#ifndef SF_AVX2_WIDE_Q4_0_H
#define SF_AVX2_WIDE_Q4_0_H

/* Weight vectors of 8 rows a pass and activation rows a pass: R * V int16 sums, V weights
 * and the broadcast, about the 16 registers. One thread, best of 5 interleaved, the draft's
 * gate/up [9728, 896] / down [896, 4864] at 512 rows, AMD EPYC Zen 4, GMAC/s: V = 2, R = 5
 * 88 / 103; V = 2, R = 6 90 / 107; V = 4, R = 2 90 / 105; V = 4, R = 3 97-101 / 106-111;
 * V = 1, R = 10 86 / 98 (the repacked kernels 55 / 62). */
#define SF_WIDE32_V 4
#define SF_WIDE32_R 3

SF_ALWAYS_INLINE void wide32_rows_r(const sf_wide_block_32 *t, int64_t nb, const uint8_t *xq, size_t xrb,
                                    const int32_t *xoff, float *y, int64_t ldy, const int R) {
    /* the float lanes (lane b % 8 of block b), in memory: the block loop holds every register */
    _Alignas(32) float lanes[8][SF_WIDE32_R][SF_WIDE_ROWS];
    for (int l = 0; l < 8; l++)
        for (int r = 0; r < R; r++)
            for (int n = 0; n < SF_WIDE_ROWS; n++) lanes[l][r][n] = 0.0f;
    const sf_act_32 *x[SF_WIDE32_R];
    for (int r = 0; r < R; r++) x[r] = (const sf_act_32 *)(xq + (size_t)r * xrb);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < nb; i++) {
        float(*acc)[SF_WIDE_ROWS] = lanes[i % 8];
        for (int h = 0; h < SF_WIDE_ROWS / (8 * SF_WIDE32_V); h++) {
            __m256i s[SF_WIDE32_R][SF_WIDE32_V];
            for (int r = 0; r < R; r++)
                for (int v = 0; v < SF_WIDE32_V; v++) s[r][v] = _mm256_setzero_si256();
            const uint8_t *q = &t[i].q[0][8 * SF_WIDE32_V * h][0];
            for (int j = 0; j < SF_QK32 / 4; j++, q += 4 * SF_WIDE_ROWS) {
                __m256i u[SF_WIDE32_V];
                for (int v = 0; v < SF_WIDE32_V; v++) u[v] = _mm256_load_si256((const __m256i *)(q + 32 * v));
                for (int r = 0; r < R; r++) {
                    int32_t four;
                    memcpy(&four, x[r][i].qs + 4 * j, 4);
                    __m256i xb = _mm256_set1_epi32(four);
                    SF_WIDE_PIN(xb);
                    for (int v = 0; v < SF_WIDE32_V; v++) {
                        s[r][v] = _mm256_add_epi16(s[r][v], _mm256_maddubs_epi16(u[v], xb));
                        SF_WIDE_PIN(s[r][v]);
                    }
                }
            }
            for (int r = 0; r < R; r++) {  /* sf_q32_term: (d_w * d_x) * (float)isum, into lane i % 8 */
                const __m256 xd = _mm256_set1_ps(x[r][i].d);
                const __m256i off = _mm256_set1_epi32(xoff[r * nb + i]);
                for (int v = 0; v < SF_WIDE32_V; v++) {
                    const int n = 8 * (SF_WIDE32_V * h + v);
                    const __m256i isum = _mm256_add_epi32(_mm256_madd_epi16(s[r][v], ones), off);
                    const __m256 d = _mm256_mul_ps(_mm256_load_ps(t[i].d + n), xd);
                    _mm256_store_ps(acc[r] + n, _mm256_add_ps(_mm256_load_ps(acc[r] + n),
                                                              _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum))));
                }
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int n = 0; n < SF_WIDE_ROWS; n += 8) {  /* sf_lanes8_sum, 8 weight rows at once */
#define SF_LANE(l) _mm256_load_ps(lanes[l][r] + n)
            const __m256 s0 = _mm256_add_ps(SF_LANE(0), SF_LANE(4)), s1 = _mm256_add_ps(SF_LANE(1), SF_LANE(5));
            const __m256 s2 = _mm256_add_ps(SF_LANE(2), SF_LANE(6)), s3 = _mm256_add_ps(SF_LANE(3), SF_LANE(7));
#undef SF_LANE
            _mm256_storeu_ps(y + r * ldy + n, _mm256_add_ps(_mm256_add_ps(s0, s2), _mm256_add_ps(s1, s3)));
        }
}

#include "x86_wide32_rows.h"

#endif /* SF_AVX2_WIDE_Q4_0_H */
