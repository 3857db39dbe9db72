/* The wide products on AVX-512 VNNI (blocks.h sf_wide_block), included by avx512.c after
 * x86_body.h: bit for bit ref.c's ref_wide_tile and ref_wide_rows. The tile's values are
 * the reference dequantizer's floats (the same multiply and subtract, lane by lane) and the
 * activation quantizer's rounding (sf_act_scale's d and 1 / d, cvtps in the current mode as
 * nearbyintf); the products are exact integers and the same float steps per super-block. */
#ifndef SF_X86_WIDE_H
#define SF_X86_WIDE_H

/* Rows per pass: 2R int32 and 2R float accumulators + 2 weight registers of 32 */
#define SF_WIDE_R 6

#include "x86_wide_shared.h"

/* ---- tiles: 8 rows (one x8 group) of one super-block at a time ---- */

/* vals[j][16h + 4n' + b] = value 4j + b of row 4h + n' of the group: the layout the tile
 * keeps, so that quantizing is one multiply, convert and narrow per 16 values */
struct wide_vals {
    _Alignas(64) float v[SF_QKK / 4][32];
};

/* lanes 4n..4n+3 <- x[n] for n < 4 */
static inline __m512 rows4(const float x[4]) {
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                 _mm512_castps128_ps512(_mm_loadu_ps(x)));
}

/* The 8 rows' amax and scales (all values finite): then every value quantized into tile
 * rows base..base+7 (+ 128), sf_act_scale's edge cases as the reference has them. */
static void wide_quantize_group(const struct wide_vals *w, const __m512 vmax[2], sf_wide_block *t, int base) {
    float amax[8], id[8];
    int zero[8];
    for (int h = 0; h < 2; h++) {
        __m512 m = vmax[h];
        m = _mm512_max_ps(m, _mm512_permute_ps(m, 0xb1));  /* max within each 128-bit lane: one row */
        m = _mm512_max_ps(m, _mm512_permute_ps(m, 0x4e));
        float lanes[16];
        _mm512_storeu_ps(lanes, m);
        for (int n = 0; n < 4; n++) amax[4 * h + n] = lanes[4 * n];
    }
    wide_group_scales(amax, t, base, id, zero);
    const __m512 ida = rows4(id), idb = rows4(id + 4);
    const __m128i flip = _mm_set1_epi8((char)0x80);
    for (int j = 0; j < SF_QKK / 4; j++) {
        const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w->v[j]), ida));
        const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w->v[j] + 16), idb));
        _mm_storeu_si128((__m128i *)&t->q[j][base][0], _mm_xor_si128(_mm512_cvtsepi32_epi8(qa), flip));
        _mm_storeu_si128((__m128i *)&t->q[j][base + 4][0], _mm_xor_si128(_mm512_cvtsepi32_epi8(qb), flip));
    }
    wide_zero_rows(t, base, zero);
}

/* 16 values (4 rows x 4) of the reference dequantizer's (s * q - m; Q6_K: s * q), kept with
 * their running amax: the fast paths run only where every scale of the 8 rows is finite, so
 * no value is a NaN or infinite and no NaN flags are needed (wide_group_slow has the rest) */
static inline void wide_put(struct wide_vals *w, int j, int h, __m512 f, __m512 *vmax) {
    *vmax = _mm512_max_ps(*vmax, _mm512_abs_ps(f));
    _mm512_store_ps(w->v[j] + 16 * h, f);
}

static void wide_q4_K_group(const sf_block_q4_K_x8 *g, sf_wide_block *t, int base) {
    _Alignas(64) float ds[8][8], dm[8][8];  /* [sub-block][row] */
    if (!wide_q4_K_scales(g, ds, dm)) {
        wide_group_slow(SF_Q4_K_X8, (const uint8_t *)g, t, base);
        return;
    }
    __m512 dsv[8][2], dmv[8][2];  /* [sub-block][half]: lanes 4n..4n+3 = row 4 half + n */
    for (int j = 0; j < 8; j++)
        for (int h = 0; h < 2; h++) {
            dsv[j][h] = rows4(ds[j] + 4 * h);
            dmv[j][h] = rows4(dm[j] + 4 * h);
        }
    struct wide_vals w;
    __m512 vmax[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int v = 0; v < 32; v++) {  /* line v: bytes 4v..4v+3 of each row's 32-byte run v / 8 */
        const __m256i line = _mm256_loadu_si256((const __m256i *)g->qs[v]);
        const int run = v / 8, j = 16 * run + v % 8;  /* quad of the low nibbles; the high: j + 8 */
        const __m256i nib[2] = {_mm256_and_si256(line, low), _mm256_and_si256(_mm256_srli_epi16(line, 4), low)};
        for (int hi = 0; hi < 2; hi++) {
            const int sub = 2 * run + hi;
            for (int h = 0; h < 2; h++) {
                const __m128i bytes = h ? _mm256_extracti128_si256(nib[hi], 1) : _mm256_castsi256_si128(nib[hi]);
                const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes));
                const __m512 f = _mm512_sub_ps(_mm512_mul_ps(dsv[sub][h], q), dmv[sub][h]);
                wide_put(&w, j + 8 * hi, h, f, &vmax[h]);
            }
        }
    }
    wide_quantize_group(&w, vmax, t, base);
}

static void wide_q6_K_group(const sf_block_q6_K_x8 *g, sf_wide_block *t, int base) {
    _Alignas(64) float ds[16][8];  /* [run of 16 values][row] */
    if (!wide_q6_K_scales(g, ds)) {
        wide_group_slow(SF_Q6_K_X8, (const uint8_t *)g, t, base);
        return;
    }
    __m512 dsv[16][2];  /* [run][half] */
    for (int r = 0; r < 16; r++)
        for (int h = 0; h < 2; h++) dsv[r][h] = rows4(ds[r] + 4 * h);
    struct wide_vals w;
    __m512 vmax[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int v = 0; v < 16; v++) {  /* quads v, v + 16, v + 32, v + 48 (sf_block_q6_K_x8) */
        __m256i quads[4];
        wide_q6_K_quads(g, v, quads);
        for (int s = 0; s < 4; s++) {  /* quad v + 16 s */
            const __m256i q = quads[s];
            const int j = v + 16 * s;
            for (int h = 0; h < 2; h++) {
                const __m128i bytes = h ? _mm256_extracti128_si256(q, 1) : _mm256_castsi256_si128(q);
                const __m512 f = _mm512_mul_ps(dsv[j / 4][h], _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)));
                wide_put(&w, j, h, f, &vmax[h]);
            }
        }
    }
    wide_quantize_group(&w, vmax, t, base);
}

/* ---- products: R activation rows against the tile's 32 rows, two zmm of int32 a row ---- */


SF_ALWAYS_INLINE void wide_rows_r(const sf_wide_block *t, int64_t nb, const uint8_t *xq, size_t xrb,
                                  const int32_t *xsum, float *y, int64_t ldy, const int R) {
    __m512 ya[SF_WIDE_R], yb[SF_WIDE_R];
    for (int r = 0; r < R; r++) ya[r] = yb[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const int8_t *xs[SF_WIDE_R];
        __m512i aa[SF_WIDE_R], ab[SF_WIDE_R];
        for (int r = 0; r < R; r++) {
            xs[r] = ((const sf_act_k *)(xq + (size_t)r * xrb))[i].qs;
            aa[r] = ab[r] = _mm512_set1_epi32(-128 * xsum[r * nb + i]);  /* the + 128 of the weights */
        }
        const uint8_t *q = &t[i].q[0][0][0];
        for (int j = 0; j < SF_QKK / 4; j++, q += 4 * SF_WIDE_ROWS) {
            const __m512i wa = _mm512_load_si512((const void *)q), wb = _mm512_load_si512((const void *)(q + 64));
            for (int r = 0; r < R; r++) {
                int32_t four;
                memcpy(&four, xs[r] + 4 * j, 4);
                const __m512i x = _mm512_set1_epi32(four);
                aa[r] = _mm512_dpbusd_epi32(aa[r], wa, x);
                ab[r] = _mm512_dpbusd_epi32(ab[r], wb, x);
            }
        }
        const __m512 da = _mm512_loadu_ps(t[i].d), db = _mm512_loadu_ps(t[i].d + 16);
        for (int r = 0; r < R; r++) {
            const __m512 xd = _mm512_set1_ps(((const sf_act_k *)(xq + (size_t)r * xrb))[i].d);
            ya[r] = _mm512_add_ps(ya[r], _mm512_mul_ps(_mm512_cvtepi32_ps(aa[r]), _mm512_mul_ps(xd, da)));
            yb[r] = _mm512_add_ps(yb[r], _mm512_mul_ps(_mm512_cvtepi32_ps(ab[r]), _mm512_mul_ps(xd, db)));
        }
    }
    for (int r = 0; r < R; r++) {
        _mm512_storeu_ps(y + r * ldy, ya[r]);
        _mm512_storeu_ps(y + r * ldy + 16, yb[r]);
    }
}

#undef SF_X86_WIDE_OPS
#define SF_X86_WIDE_OPS .wide_tile = wide_tile, .wide_rows = wide_rows

#endif /* SF_X86_WIDE_H */
