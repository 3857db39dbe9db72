/* The wide products on AVX2 (blocks.h sf_wide_block), included by avx2.c after x86_body.h:
 * bit for bit ref.c's ref_wide_tile and ref_wide_rows. The tiles are x86_wide.h's (AVX-512)
 * made on 256-bit registers: the reference dequantizer's floats lane by lane, the activation
 * quantizer's rounding (cvtps in the current mode, as nearbyintf). The products differ: AVX2
 * has no u8 x s8 dot product into int32, and vpmaddubsw's int16 pair of the stored weight
 * (+ 128, up to 255) times an activation (up to 127) would saturate. They run on int16
 * instead (vpmaddwd, two exact products into an int32). The sign trick (|w| as vpmaddubsw's
 * unsigned operand, vpsignb giving the activation w's sign, vpmaddwd with ones) is exact too
 * (both quantizers stay in [-127, 127], so a pair is at most 32258), but on Zen 4 vpsignb
 * takes the multipliers' ports: it peaked at 73 GMAC/s a thread against 93 for vpmaddwd +
 * vpaddd, and as products 64 against 68 GMAC/s (AMD EPYC Zen 4, one thread, Q4_K 2048 x
 * 1536, 512 rows). The float steps are the reference's, in its order. */
#ifndef SF_AVX2_WIDE_H
#define SF_AVX2_WIDE_H

/* Weight vectors a pass (even: two fold into one ymm of 8 rows) and activation rows a pass:
 * R * V int32 sums, V weights, the broadcast and a temporary in 16 registers. One thread,
 * best of 3 x 25 calls interleaved, Q4_K 2048 x 1536, 512 rows, AMD EPYC Zen 4, GMAC/s:
 * V = 2: R = 4 67.0, 5 69.1, 6 71.3 (7 spills); V = 4, R = 2: 64.6. */
#define SF_WIDE_V 2
#define SF_WIDE_R 6

#include "x86_wide_shared.h"

/* ---- tiles: 8 rows (one x8 group) of one super-block at a time ---- */

/* vals[j][4n + b] = value 4j + b of row n of the group: the tile's own order, so quantizing
 * is a multiply, a convert and a narrow per 32 values */
struct wide_vals {
    _Alignas(32) float v[SF_QKK / 4][32];
};

/* lanes 0..3 <- x[0], lanes 4..7 <- x[1]: a ymm of tile values holds 4 values of 2 rows */
static inline __m256 rows2(const float x[2]) { return _mm256_setr_ps(x[0], x[0], x[0], x[0], x[1], x[1], x[1], x[1]); }

/* 8-byte chunk p (0..3) of a register of 32 bytes, widened: values 4j..4j+3 of rows 2p, 2p + 1 */
static inline __m128i chunk8(__m256i v, int p) {
    const __m128i half = p < 2 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1);
    return p % 2 ? _mm_unpackhi_epi64(half, half) : half;
}

/* The 8 rows' amax and scales (all values finite): then every value quantized into tile
 * rows base..base+7 (+ 128), sf_act_scale's edge cases as the reference has them. */
static void wide_quantize_group(const struct wide_vals *w, const __m256 vmax[4], sf_wide_block *t, int base) {
    float amax[8], id[8];
    int zero[8];
    for (int p = 0; p < 4; p++) {
        __m256 m = vmax[p];
        m = _mm256_max_ps(m, _mm256_permute_ps(m, 0xb1));  /* max within each 128-bit lane: one row */
        m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4e));
        float lanes[8];
        _mm256_storeu_ps(lanes, m);
        amax[2 * p] = lanes[0];
        amax[2 * p + 1] = lanes[4];
    }
    wide_group_scales(amax, t, base, id, zero);
    __m256 idv[4];
    for (int p = 0; p < 4; p++) idv[p] = rows2(id + 2 * p);
    const __m256i flip = _mm256_set1_epi8((char)0x80), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int j = 0; j < SF_QKK / 4; j++) {
        __m256i q[4];  /* cvtps rounds in the current mode, as nearbyintf does */
        for (int p = 0; p < 4; p++) q[p] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(w->v[j] + 8 * p), idv[p]));
        /* the packs saturate, but no value leaves [-127, 127]; the permute undoes their lane order */
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)&t->q[j][base][0], _mm256_xor_si256(_mm256_permutevar8x32_epi32(b, order), flip));
    }
    wide_zero_rows(t, base, zero);
}

/* 8 values (2 rows x 4) of the reference dequantizer's (s * q - m; Q6_K: s * q), kept with
 * their running amax: the fast paths run only where every scale of the 8 rows is finite, so
 * no value is a NaN or infinite (wide_group_slow has the rest) */
static inline void wide_put(struct wide_vals *w, int j, int p, __m256 f, __m256 *vmax) {
    *vmax = _mm256_max_ps(*vmax, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), f));
    _mm256_store_ps(w->v[j] + 8 * p, f);
}

static void wide_q4_K_group(const sf_block_q4_K_x8 *g, sf_wide_block *t, int base) {
    float ds[8][8], dm[8][8];  /* [sub-block][row] */
    if (!wide_q4_K_scales(g, ds, dm)) {
        wide_group_slow(SF_Q4_K_X8, (const uint8_t *)g, t, base);
        return;
    }
    __m256 dsv[8][4], dmv[8][4];  /* [sub-block][p]: lanes 0..3 row 2p, 4..7 row 2p + 1 */
    for (int j = 0; j < 8; j++)
        for (int p = 0; p < 4; p++) {
            dsv[j][p] = rows2(ds[j] + 2 * p);
            dmv[j][p] = rows2(dm[j] + 2 * p);
        }
    struct wide_vals w;
    __m256 vmax[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int v = 0; v < 32; v++) {  /* line v: bytes 4v..4v+3 of each row's 32-byte run v / 8 */
        const __m256i line = _mm256_loadu_si256((const __m256i *)g->qs[v]);
        const int run = v / 8, j = 16 * run + v % 8;  /* quad of the low nibbles; the high: j + 8 */
        const __m256i nib[2] = {_mm256_and_si256(line, low), _mm256_and_si256(_mm256_srli_epi16(line, 4), low)};
        for (int hi = 0; hi < 2; hi++) {
            const int sub = 2 * run + hi;
            for (int p = 0; p < 4; p++) {
                const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(chunk8(nib[hi], p)));
                const __m256 f = _mm256_sub_ps(_mm256_mul_ps(dsv[sub][p], q), dmv[sub][p]);
                wide_put(&w, j + 8 * hi, p, f, &vmax[p]);
            }
        }
    }
    wide_quantize_group(&w, vmax, t, base);
}

static void wide_q6_K_group(const sf_block_q6_K_x8 *g, sf_wide_block *t, int base) {
    float ds[16][8];  /* [run of 16 values][row] */
    if (!wide_q6_K_scales(g, ds)) {
        wide_group_slow(SF_Q6_K_X8, (const uint8_t *)g, t, base);
        return;
    }
    __m256 dsv[16][4];  /* [run][p] */
    for (int r = 0; r < 16; r++)
        for (int p = 0; p < 4; p++) dsv[r][p] = rows2(ds[r] + 2 * p);
    struct wide_vals w;
    __m256 vmax[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int v = 0; v < 16; v++) {  /* quads v, v + 16, v + 32, v + 48 (sf_block_q6_K_x8) */
        __m256i quads[4];
        wide_q6_K_quads(g, v, quads);
        for (int s = 0; s < 4; s++) {  /* quad v + 16 s */
            const __m256i q = quads[s];
            const int j = v + 16 * s;
            for (int p = 0; p < 4; p++) {
                const __m256 f = _mm256_mul_ps(dsv[j / 4][p], _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(chunk8(q, p))));
                wide_put(&w, j, p, f, &vmax[p]);
            }
        }
    }
    wide_quantize_group(&w, vmax, t, base);
}

/* ---- products: R activation rows against the tile's 32 rows, 4 V weight rows a pass ----
 * On int16: the stored weight u = w + 128 zero-extended, the activation sign-extended, and
 * vpmaddwd adds two exact products into an int32; the + 128 comes off through the block's
 * activation sum (sum (w + 128) x = sum w x + 128 sum x), as on AVX-512. A ymm holds the
 * 4 values of quad j of 4 weight rows, and an activation row meets it with its 4 values
 * broadcast: two int32 lanes a weight row, added at the end of the super-block. */


/* An empty asm on a value: GCC keeps the rows' steps in source order instead of loading
 * every row's broadcast first, which held R * V products at once and spilled the sums
 * (46-47 GMAC/s at R = 5-7 without it, pinning the products instead of the sums as slow) */
#define SF_WIDE_PIN(v) __asm__ volatile("" : "+x"(v))

SF_ALWAYS_INLINE void wide_rows_r(const sf_wide_block *t, int64_t nb, const uint8_t *xq, size_t xrb,
                                  const int32_t *xsum, float *y, int64_t ldy, const int R) {
    /* the float sums, in memory: the super-block loop around them holds every register */
    _Alignas(32) float acc[SF_WIDE_R][SF_WIDE_ROWS];
    for (int r = 0; r < R; r++)
        for (int n = 0; n < SF_WIDE_ROWS; n++) acc[r][n] = 0.0f;
    /* lanes (0, 1, 4, 5, 2, 3, 6, 7) of hadd(rows 0..3, rows 4..7) are rows 0..7 */
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    for (int64_t i = 0; i < nb; i++) {
        _Alignas(32) int16_t xw[SF_WIDE_R][SF_QKK];  /* the rows' activation block, widened once */
        __m256i off[SF_WIDE_R];  /* -128 * the block's sum in the first lane of each weight row */
        for (int r = 0; r < R; r++) {
            const sf_act_k *x = (const sf_act_k *)(xq + (size_t)r * xrb) + i;
            for (int k = 0; k < SF_QKK; k += 16)
                _mm256_store_si256((__m256i *)&xw[r][k], _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x->qs + k))));
            off[r] = _mm256_set_epi32(0, -128 * xsum[r * nb + i], 0, -128 * xsum[r * nb + i], 0,
                                      -128 * xsum[r * nb + i], 0, -128 * xsum[r * nb + i]);
        }
        for (int h = 0; h < SF_WIDE_ROWS / (4 * SF_WIDE_V); h++) {
            __m256i s[SF_WIDE_R][SF_WIDE_V];
            for (int r = 0; r < R; r++)
                for (int v = 0; v < SF_WIDE_V; v++) s[r][v] = off[r];
            const uint8_t *q = &t[i].q[0][4 * SF_WIDE_V * h][0];
            for (int j = 0; j < SF_QKK / 4; j++, q += 4 * SF_WIDE_ROWS) {
                __m256i u[SF_WIDE_V];
                for (int v = 0; v < SF_WIDE_V; v++) u[v] = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(q + 16 * v)));
                for (int r = 0; r < R; r++) {
                    int64_t four;
                    memcpy(&four, &xw[r][4 * j], 8);
                    __m256i x = _mm256_set1_epi64x(four);
                    SF_WIDE_PIN(x);
                    for (int v = 0; v < SF_WIDE_V; v++) {
                        s[r][v] = _mm256_add_epi32(s[r][v], _mm256_madd_epi16(u[v], x));
                        SF_WIDE_PIN(s[r][v]);
                    }
                }
            }
            for (int r = 0; r < R; r++) {  /* acc + (float)isum * (x.d * tile.d[n]), as the reference */
                const __m256 xd = _mm256_set1_ps(((const sf_act_k *)(xq + (size_t)r * xrb))[i].d);
                for (int v = 0; v < SF_WIDE_V; v += 2) {
                    const int n = 4 * (SF_WIDE_V * h + v);
                    const __m256i isum = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(s[r][v], s[r][v + 1]), order);
                    const __m256 d = _mm256_mul_ps(xd, _mm256_loadu_ps(t[i].d + n));
                    _mm256_store_ps(acc[r] + n, _mm256_add_ps(_mm256_load_ps(acc[r] + n),
                                                              _mm256_mul_ps(_mm256_cvtepi32_ps(isum), d)));
                }
            }
        }
    }
    for (int r = 0; r < R; r++) memcpy(y + r * ldy, acc[r], sizeof acc[r]);
}

#undef SF_X86_WIDE_OPS
#define SF_X86_WIDE_OPS .wide_tile = wide_tile, .wide_rows = wide_rows

#endif /* SF_AVX2_WIDE_H */
