/* The x86 kernels, compiled once per ISA: avx2.c and avx512.c each set a target pragma and
 * SF_X86_VNNI, then include this file. Bit-identical to ref.c: the integer work is exact
 * (any order, and VNNI's fused multiply-adds give the same int32 as maddubs + madd, which
 * cannot saturate here), and the float work per block is the shared sf_*_term code of
 * blocks.h, in the same k order (for the 32-value types, 8 blocks per register = the
 * reference's 8 lanes). variants.c only runs a variant where the CPU has its flags. */
#ifndef SF_X86_BODY_H
#define SF_X86_BODY_H

#include <immintrin.h>

#include "layer_body.h"
#include "rows_x8.h"

/* sum += <16-bit pairs of p, 16-bit pairs of s> per int32 lane (madd, then add) */
#if SF_X86_VNNI
#define SF_MADD_ADD(sum, p, s) _mm256_dpwssd_epi32((sum), (p), (s))
#else
#define SF_MADD_ADD(sum, p, s) _mm256_add_epi32((sum), _mm256_madd_epi16((p), (s)))
#endif

/* ---- small helpers ---- */

static inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* lane b = sum of the 8 lanes of s[b] */
static inline __m256i hsum8_i32(const __m256i s[8]) {
    const __m256i h01 = _mm256_hadd_epi32(s[0], s[1]), h23 = _mm256_hadd_epi32(s[2], s[3]);
    const __m256i h45 = _mm256_hadd_epi32(s[4], s[5]), h67 = _mm256_hadd_epi32(s[6], s[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

static inline __m256i loadu(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* ---- activations: ref_quant_block, 8 floats at a time ---- */

static float quant_block(const float *x, int n, int8_t *q) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 vmax = _mm256_setzero_ps(), vnan = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        vnan = _mm256_or_ps(vnan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, v));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    const float amax = _mm_cvtss_f32(m);  /* a max is exact in any order */
    float d, id;
    if (!sf_act_scale(amax, _mm256_movemask_ps(vnan) != 0, n, q, &d, &id)) return d;
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int i = 0; i < n; i += 32) {
        /* cvtps rounds in the current mode, as nearbyintf does */
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i), vid));
        const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), vid));
        const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 16), vid));
        const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 24), vid));
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256((__m256i *)(q + i), _mm256_permutevar8x32_epi32(b, order));
    }
    return d;
}

SF_QUANT_ROWS(quant_k, quant_32, quant_block)

/* ---- Q8_0 / Q5_0 / Q4_0: 32 signed weights of one block in a register ---- */

enum { SF_W_Q8_0, SF_W_Q5_0, SF_W_Q4_0 };

static inline __m256i q8_0_weights(const uint8_t *blk) {
    return loadu(((const sf_block_q8_0 *)blk)->qs);
}

static inline __m256i q4_0_weights(const uint8_t *blk) {
    const __m128i qs = _mm_loadu_si128((const __m128i *)((const sf_block_q4_0 *)blk)->qs);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i q = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
}

static inline __m256i q5_0_weights(const uint8_t *blk) {
    const sf_block_q5_0 *b = (const sf_block_q5_0 *)blk;
    const __m128i qs = _mm_loadu_si128((const __m128i *)b->qs);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i lo = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), _mm_and_si128(qs, m4));
    uint32_t qh;
    memcpy(&qh, b->qh, sizeof qh);
    /* byte i <- byte i/8 of qh, then test bit i%8 */
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                         2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ULL);
    const __m256i hi = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hi, _mm256_set1_epi8(0x10)));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
}

/* <w, x> of one block as 8 int32 partial sums; w signed (|w| <= 128), x in [-127, 127]:
 * |w| * (x * sign w) in maddubs cannot saturate (2 * 128 * 127 < 32767). */
static inline __m256i dot32_partial(__m256i w, const int8_t *xq) {
#if SF_X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(loadu(xq), w));
#else
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(loadu(xq), w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
#endif
}

static inline __attribute__((always_inline)) __m256i weights32(const uint8_t *blk, int kind) {
    return kind == SF_W_Q5_0 ? q5_0_weights(blk) : kind == SF_W_Q4_0 ? q4_0_weights(blk) : q8_0_weights(blk);
}

static inline __attribute__((always_inline)) float
dot32(const uint8_t *w, size_t bsize, const sf_act_32 *x, int64_t nb, int kind) {
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        __m256i s[8];
        uint16_t d[8];
        for (int b = 0; b < 8; b++) {
            const uint8_t *blk = w + (size_t)(i + b) * bsize;
            s[b] = dot32_partial(weights32(blk, kind), x[i + b].qs);
            d[b] = sf_u16(blk);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
        const __m256 dx = _mm256_setr_ps(x[i].d, x[i + 1].d, x[i + 2].d, x[i + 3].d,
                                         x[i + 4].d, x[i + 5].d, x[i + 6].d, x[i + 7].d);
        /* sf_q32_term, 8 lanes: (d_w * d_x) * (float) sumi */
        acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(hsum8_i32(s))));
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    for (; i < nb; i++) {
        const uint8_t *blk = w + (size_t)i * bsize;
        const int32_t s = hsum_i32(dot32_partial(weights32(blk, kind), x[i].qs));
        lanes[i % 8] += sf_q32_term(sf_u16(blk), x[i].d, s);
    }
    return sf_lanes8_sum(lanes);
}

#define ROWS32(NAME, BLOCK, KIND)                                                                \
    static void NAME(const uint8_t *w, size_t wrb, int64_t nrows, const uint8_t *xq,             \
                     size_t xrb, int64_t M, int64_t K, float *y, int64_t ldy) {                  \
        for (int64_t r = 0; r < nrows; r++)                                                      \
            for (int64_t m = 0; m < M; m++)                                                      \
                y[m * ldy + r] = dot32(w + r * wrb, sizeof(BLOCK), (const sf_act_32 *)(xq + m * xrb), \
                                       K / SF_QK32, KIND);                                       \
    }

ROWS32(rows_q8_0, sf_block_q8_0, SF_W_Q8_0)
ROWS32(rows_q5_0, sf_block_q5_0, SF_W_Q5_0)
ROWS32(rows_q4_0, sf_block_q4_0, SF_W_Q4_0)

/* ---- Q4_K ---- */

/* The 8 scales and 8 mins of a super-block (sf_q4k_scales, on 32-bit words) as int16:
 * scales in both 128-bit lanes, and each min twice ([m0, m0, m1, m1, ...]) to meet the
 * activation block sums, which come in pairs per 32-value sub-block. */
static inline void q4k_scales16(const uint8_t s[12], __m256i *sc, __m256i *mn2) {
    uint32_t u[3];
    memcpy(u, s, sizeof u);
    const uint32_t sc03 = u[0] & 0x3f3f3f3fu, mn03 = u[1] & 0x3f3f3f3fu;
    const uint32_t sc47 = (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u);
    const uint32_t mn47 = ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u);
    const __m128i sc8 = _mm_cvtepu8_epi16(_mm_setr_epi32((int)sc03, (int)sc47, 0, 0));
    const __m128i mn8 = _mm_cvtepu8_epi16(_mm_setr_epi32((int)mn03, (int)mn47, 0, 0));
    *sc = _mm256_broadcastsi128_si256(sc8);
    *mn2 = _mm256_set_m128i(_mm_unpackhi_epi16(mn8, mn8), _mm_unpacklo_epi16(mn8, mn8));
}

/* int16 word j of a 128-bit lane, in every word */
#define Q4K_WORD(j) _mm256_set1_epi16((short)((2 * (j)) | ((2 * (j) + 1) << 8)))

/* R activation rows against one weight row, so that each super-block's weights and scales
 * are unpacked once for R rows. Each y[m, n] still gets its own exact integers and the
 * reference's float steps: R changes which rows share an unpack, never a value. R is a
 * constant at every call (1..SF_X86_RMAX), so the loops over R unroll into registers.
 *
 * Super-blocks go in groups of 8: block b of a group leaves its int32 partial sums in
 * part[k][b] (8 lanes, on the stack), hsum8_i32 reduces the group's 8 vectors at once into
 * one lane per block, and the float work of the 8 blocks is one vector operation per step
 * (lane b = the reference's lane i % 8). A group of fewer than 8 (the end of a row) adds
 * only its own lanes, so an untouched lane stays +0.0 as in the reference. */
#define SF_ALWAYS_INLINE static inline __attribute__((always_inline))

/* lanes b < n all ones */
static inline __m256 first_lanes(int n) {
    return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)));
}

SF_ALWAYS_INLINE __m256 add_lanes(__m256 acc, __m256 t, int n) {
    return n == 8 ? _mm256_add_ps(acc, t) : _mm256_blendv_ps(acc, _mm256_add_ps(acc, t), first_lanes(n));
}

/* lane b = x[i0 + b].d for b < n, else 0 */
SF_ALWAYS_INLINE __m256 act_scales(const sf_act_k *x, int64_t i0, int n) {
    float d[8] = {0};
    for (int b = 0; b < n; b++) d[b] = x[i0 + b].d;
    return _mm256_loadu_ps(d);
}

static inline __m256 fp16x8(const uint16_t h[8]) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)); }

SF_ALWAYS_INLINE void store_lanes_sum(const __m256 *acc, int R, float *out) {
    for (int k = 0; k < R; k++) {
        float lanes[8];
        _mm256_storeu_ps(lanes, acc[k]);
        out[k] = sf_lanes8_sum(lanes);
    }
}

/* The weights stream from DRAM once a step, and the hardware prefetcher alone left the next
 * bytes arriving after the unpack needed them (a pass took compute time plus memory time),
 * so every call asks for the bytes SF_PREFETCH_BYTES ahead: past a row's end that is the
 * next row, which the same thread takes next (prefetches never fault). At one row too, since
 * the unpacking went to 512-bit registers: bench kernels, Intel Xeon, avx512, two builds
 * each way, one row 37.8 / 39.8 ms a pass with it against 45.7 / 46.1 without (before that
 * change the one-row prefetch had cost time: 52.5 / 50.9 against 46.6 / 48.3), and the
 * draft's one-row step 20.2 -> 17.8 ms. __builtin_prefetch, not _mm_prefetch: GCC 12
 * dropped every _mm_prefetch of these loops as dead code (the objdump of the library had
 * no prefetch instruction at all). */
#ifndef SF_PREFETCH_BYTES
#define SF_PREFETCH_BYTES 1536
#endif
/* With several activation rows a super-block takes hundreds of cycles (8 rows of Q4_K x8:
 * ~400), so the bytes 1536 ahead are asked for about one DRAM latency before their use and
 * the multi-row passes waited on memory (8 rows of the 1.5B target streamed ~13 GB/s, the
 * same kernels ran 146 GMAC/s a thread on weights in cache). From SF_PREFETCH_FAR_ROWS rows
 * on, the bytes SF_PREFETCH_FAR ahead are asked for as well, into L2 (prefetcht1; in L1 they
 * would push out the rows' activations). AMD EPYC Zen 4, 2 threads, whole feeds of the
 * target, base and this alternating (6 rounds; pooled medians, median per-round ratio): 1
 * row 31.3 / 32.9 ms (0.999: unchanged code, noise), 4 rows 53.7 -> 51.2 (0.956), 8 rows
 * 81.0 -> 71.8 (0.900), 16 rows 157.3 -> 153.3 (0.959). At one row the far requests cost
 * 15-22 % (a 113 MB Q4_K and the 191 MB Q6_K head, 2 threads: the hardware prefetcher keeps
 * up with a one-row stream). From 4 rows, not 2: in one probe (with a Q6_K kernel that did
 * not land) 2-3 rows of the head ran slower. */
#ifndef SF_PREFETCH_FAR
#define SF_PREFETCH_FAR 8192
#endif
/* avx512.c sets 4; AVX2 (no far requests) kept its time or lost it, its kernels being the
 * slower part there: same probes, 4 / 8 / 16 rows, Q4_K 1.065 / 0.967 / 0.983 of before,
 * the Q6_K head 1.200 / 1.040 / 1.057. */
#ifndef SF_PREFETCH_FAR_ROWS
#define SF_PREFETCH_FAR_ROWS (1 << 30)
#endif
SF_ALWAYS_INLINE void prefetch_ahead(const void *blk, size_t bytes, int R) {
    const char *p = (const char *)blk + SF_PREFETCH_BYTES;
    for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
    if (R >= SF_PREFETCH_FAR_ROWS) {
        const char *f = (const char *)blk + SF_PREFETCH_FAR;
        for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(f + off, 0, 2);
    }
}

/* Independent int32 accumulators per activation row, so that a block's eight multiply-adds
 * are not one chain of eight latencies: with one or two rows nothing else hides them (a
 * chain of 8 cost ~40 cycles a block on Zen 4). Integer sums, so the split changes no bit. */
#ifndef SF_CHAINS
#define SF_CHAINS_MAX 4
#define SF_CHAINS(R) ((R) >= 4 ? 1 : (R) >= 2 ? 2 : 4)
#endif

SF_ALWAYS_INLINE __m256i chains_sum(__m256i sum[][SF_X86_RMAX], int chains, int k) {
    __m256i s = sum[0][k];
    for (int a = 1; a < chains; a++) s = _mm256_add_epi32(s, sum[a][k]);
    return s;
}

/* sumi = sum_j sc_j * <q_j, x_j>; nibbles x int8 in maddubs cannot saturate (2*15*127);
 * summ = sum_j m_j * (bsums 2j + 2j+1) */
SF_ALWAYS_INLINE void dot_q4_K_rows(const sf_block_q4_K *row, const sf_act_k *const *x, int R, int64_t nb,
                                    float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[SF_X86_RMAX];
    for (int k = 0; k < R; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t i0 = 0; i0 < nb; i0 += 8) {
        const int n = nb - i0 < 8 ? (int)(nb - i0) : 8;
        __m256i part[SF_X86_RMAX][8], mins[SF_X86_RMAX][8];
        uint16_t dh[8] = {0}, mh[8] = {0};
        for (int b = 0; b < n; b++) {
            const sf_block_q4_K *blk = &row[i0 + b];
            prefetch_ahead(blk, sizeof *blk, R);
            __m256i sc, mn2, sum[SF_CHAINS_MAX][SF_X86_RMAX];
            q4k_scales16(blk->scales, &sc, &mn2);
            for (int a = 0; a < SF_CHAINS(R); a++)
                for (int k = 0; k < R; k++) sum[a][k] = _mm256_setzero_si256();
            for (int g = 0; g < 4; g++) {
                const __m256i q = loadu(blk->qs + 32 * g);
                const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                const __m256i slo = _mm256_shuffle_epi8(sc, Q4K_WORD(2 * g)), shi = _mm256_shuffle_epi8(sc, Q4K_WORD(2 * g + 1));
                const int alo = (2 * g) % SF_CHAINS(R), ahi = (2 * g + 1) % SF_CHAINS(R);
                for (int k = 0; k < R; k++) {
                    const int8_t *xq = x[k][i0 + b].qs + 64 * g;
                    sum[alo][k] = SF_MADD_ADD(sum[alo][k], _mm256_maddubs_epi16(lo, loadu(xq)), slo);
                    sum[ahi][k] = SF_MADD_ADD(sum[ahi][k], _mm256_maddubs_epi16(hi, loadu(xq + 32)), shi);
                }
            }
            for (int k = 0; k < R; k++) {
                part[k][b] = chains_sum(sum, SF_CHAINS(R), k);
                mins[k][b] = _mm256_madd_epi16(mn2, loadu(x[k][i0 + b].bsums));
            }
            dh[b] = sf_u16(&blk->d);
            mh[b] = sf_u16(&blk->dmin);
        }
        for (int b = n; b < 8; b++)
            for (int k = 0; k < R; k++) part[k][b] = mins[k][b] = _mm256_setzero_si256();
        const __m256 d = fp16x8(dh), dmin = fp16x8(mh);
        for (int k = 0; k < R; k++) {
            /* sf_q4k_term, 8 blocks: (d * xd) * (float) sumi - (dmin * xd) * (float) summ */
            const __m256 xd = act_scales(x[k], i0, n);
            const __m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(hsum8_i32(part[k]))),
                                           _mm256_mul_ps(_mm256_mul_ps(dmin, xd), _mm256_cvtepi32_ps(hsum8_i32(mins[k]))));
            acc[k] = add_lanes(acc[k], t, n);
        }
    }
    store_lanes_sum(acc, R, out);
}

/* One weight row at a time (it stays in L1), all M activation rows, up to SF_X86_RMAX at a
 * time (9 rows: 8 + 1). */
/* a constant R for each case; CLAMP(n) caps n at the caller's row limit, so the cases above it
 * compile but never run */
#define SF_R(n) ((n) < SF_X86_RMAX ? (n) : SF_X86_RMAX)
#define SF_DOT_R(DOT, CLAMP, row, x, R, nb, out)      \
    switch (R) {                                      \
    case 1: DOT(row, x, 1, nb, out); break;           \
    case 2: DOT(row, x, CLAMP(2), nb, out); break;    \
    case 3: DOT(row, x, CLAMP(3), nb, out); break;    \
    case 4: DOT(row, x, CLAMP(4), nb, out); break;    \
    case 5: DOT(row, x, CLAMP(5), nb, out); break;    \
    case 6: DOT(row, x, CLAMP(6), nb, out); break;    \
    case 7: DOT(row, x, CLAMP(7), nb, out); break;    \
    case 8: DOT(row, x, CLAMP(8), nb, out); break;    \
    case 9: DOT(row, x, CLAMP(9), nb, out); break;    \
    case 10: DOT(row, x, CLAMP(10), nb, out); break;  \
    case 11: DOT(row, x, CLAMP(11), nb, out); break;  \
    case 12: DOT(row, x, CLAMP(12), nb, out); break;  \
    case 13: DOT(row, x, CLAMP(13), nb, out); break;  \
    case 14: DOT(row, x, CLAMP(14), nb, out); break;  \
    case 15: DOT(row, x, CLAMP(15), nb, out); break;  \
    default: DOT(row, x, CLAMP(16), nb, out); break;  \
    }

#define ROWS_BY_R(NAME, DOT, BLOCK)                                                            \
    static void NAME(const uint8_t *w, size_t wrb, int64_t nrows, const uint8_t *xq,           \
                     size_t xrb, int64_t M, int64_t K, float *y, int64_t ldy) {                \
        const int64_t nb = K / SF_QKK;                                                         \
        for (int64_t r = 0; r < nrows; r++) {                                                  \
            const BLOCK *row = (const BLOCK *)(w + r * wrb);                                   \
            const sf_act_k *x[SF_X86_RMAX];                                                    \
            float out[SF_X86_RMAX];                                                            \
            for (int64_t m = 0; m < M;) {                                                      \
                const int R = M - m >= SF_X86_RMAX ? SF_X86_RMAX : (int)(M - m);               \
                for (int k = 0; k < R; k++) x[k] = (const sf_act_k *)(xq + (m + k) * xrb);     \
                SF_DOT_R(DOT, SF_R, row, x, R, nb, out)                                        \
                for (int k = 0; k < R; k++) y[(m + k) * ldy + r] = out[k];                     \
                m += R;                                                                        \
            }                                                                                  \
        }                                                                                      \
    }

ROWS_BY_R(rows_q4_K, dot_q4_K_rows, sf_block_q4_K)

/* Activation rows per pass over a group: SF_X8_RMAX for the 32-value types, SF_X8K_RMAX for
 * the K-quants (avx512.c raises both, avx2.c sets the K-quants' to 5). 6 on AVX2: one-off
 * probe (AMD EPYC, one thread, 256 MB of Q4_K / Q6_K, K = 1536) against 4 and 8 rows. */
#ifndef SF_X8_RMAX
#define SF_X8_RMAX 6
#endif
#ifndef SF_X8K_RMAX
#define SF_X8K_RMAX SF_X8_RMAX
#endif
#define SF_X8_R(n) ((n) < SF_X8_RMAX ? (n) : SF_X8_RMAX)
#define SF_X8K_R(n) ((n) < SF_X8K_RMAX ? (n) : SF_X8K_RMAX)
#define SF_X8_SWITCH(DOT, group, x, R, nb, out) SF_DOT_R(DOT, SF_X8_R, group, x, R, nb, out)
#define SF_X8K_SWITCH(DOT, group, x, R, nb, out) SF_DOT_R(DOT, SF_X8K_R, group, x, R, nb, out)
#define ROWS_X8(NAME, DOT, GROUP, ACT, QK) SF_ROWS_X8(NAME, DOT, SF_X8_SWITCH, GROUP, ACT, QK, SF_X8_RMAX)
#define ROWS_X8K(NAME, DOT, GROUP, ACT, QK) SF_ROWS_X8(NAME, DOT, SF_X8K_SWITCH, GROUP, ACT, QK, SF_X8K_RMAX)

/* ---- Q4_K repacked 8 rows by 8 (sf_block_q4_K_x8) ---- */

/* pshufb pattern: in each 32-bit lane, bytes a and b of that lane as two int16 words */
#define LANE_WORDS(a, b)                                                                       \
    _mm256_setr_epi8(a, -1, b, -1, 4 + (a), -1, 4 + (b), -1, 8 + (a), -1, 8 + (b), -1, 12 + (a), -1, 12 + (b), -1, \
                     a, -1, b, -1, 4 + (a), -1, 4 + (b), -1, 8 + (a), -1, 8 + (b), -1, 12 + (a), -1, 12 + (b), -1)

/* out[k][n] = sf_lanes8_sum over lanes b of acc[k][b][n]: the reference's fold, per row n */
SF_ALWAYS_INLINE void fold_lanes(__m256 acc[][8], int R, float out[][8]) {
    for (int k = 0; k < R; k++) {
        float a[8][8];
        for (int b = 0; b < 8; b++) _mm256_storeu_ps(a[b], acc[k][b]);
        for (int n = 0; n < 8; n++) {
            const float lanes[8] = {a[0][n], a[1][n], a[2][n], a[3][n], a[4][n], a[5][n], a[6][n], a[7][n]};
            out[k][n] = sf_lanes8_sum(lanes);
        }
    }
}

static inline __m256i bcast32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* One row's sums of two unsigned quads, lo against xq and hi against xq + hi_off: VNNI
 * straight to int32, AVX2 as int16 maddubs pairs (each caller bounds how many it adds). */
SF_ALWAYS_INLINE void add_quads(__m256i *alo, __m256i *ahi, __m256i lo, __m256i hi, const int8_t *xq, int hi_off) {
    *alo = _mm256_add_epi16(*alo, _mm256_maddubs_epi16(lo, bcast32(xq)));
    *ahi = _mm256_add_epi16(*ahi, _mm256_maddubs_epi16(hi, bcast32(xq + hi_off)));
}

#if SF_X86_VNNI
/* ---- 512-bit integer work (the AVX-512 variant) ----
 * A 64-byte load holds quads q and q + 1 of 8 rows; one vpermd puts row n's two quads in
 * lanes 2n and 2n + 1, so the 8 activation bytes of those quads meet them as one 64-bit
 * broadcast. A row's vpdpbusd count halves against 256 bits (the rearranging is per weight
 * load, shared by the R rows). On Sapphire Rapids both widths issue two a cycle, so this
 * doubles the multiply-add rate (a one-off probe on the Intel Xeon: 6.3 G zmm against 6.6 G
 * ymm instructions a second on one core); Zen 4 splits a zmm in two, no loss there.
 * Lane pairs are summed at the end of a super-block (pair_sum): integers, so no bit moves. */

/* lane 2n and 2n + 1 <- lane n */
static inline __m512i lane_pairs(__m256i v) {
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
                                    _mm512_castsi256_si512(v));
}

/* [quad q of rows 0..7 | quad q + 1 of rows 0..7] -> row n's quads q, q + 1 in lanes 2n, 2n + 1 */
static inline __m512i interleave_quads(__m512i w) {
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15), w);
}

/* lane n = s[2n] + s[2n + 1] */
static inline __m256i pair_sum(__m512i s) {
    return _mm512_cvtepi64_epi32(_mm512_add_epi32(s, _mm512_srli_epi64(s, 32)));
}

static inline __m512i bcast64(const void *p) {
    int64_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi64(v);
}

/* in each 32-bit lane pair (even, odd): byte a of the even lane and byte b of the odd one,
 * each as the int16 words (byte, byte) */
#define PAIR_WORDS(a, b)                                                                       \
    _mm512_set4_epi32(((12 + (b)) << 16) | (12 + (b)) | (int)0xff00ff00, ((8 + (a)) << 16) | (8 + (a)) | (int)0xff00ff00, \
                      ((4 + (b)) << 16) | (4 + (b)) | (int)0xff00ff00, ((a) << 16) | (a) | (int)0xff00ff00)

/* in each 128-bit lane (rows 2j, 2j + 1, each in two 32-bit lanes after lane_pairs), the
 * int16 words (byte a of lanes 0, 1, 2, 3, then byte b of lanes 0, 1, 2, 3): the scales of
 * sub-blocks a and b for the words that vpackssdw leaves of two sub-blocks' sums */
#define PACKED_SCALES(a, b)                                                                          \
    _mm512_set4_epi32((int)0xff00ff00 | ((12 + (b)) << 16) | (8 + (b)), (int)0xff00ff00 | ((4 + (b)) << 16) | (b), \
                      (int)0xff00ff00 | ((12 + (a)) << 16) | (8 + (a)), (int)0xff00ff00 | ((4 + (a)) << 16) | (a))

/* lane n = s[4 (n / 2) + n % 2] + s[4 (n / 2) + n % 2 + 2]: each row's two sums of the
 * packed layout (q4_K_x8_ints_zmm) */
static inline __m256i packed_row_sum(__m512i s) {
    const __m512i t = _mm512_add_epi32(s, _mm512_shuffle_epi32(s, _MM_PERM_BADC));
    return _mm512_castsi512_si256(_mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 0, 2, 4, 6), t));
}

/* Q4_K x8, one super-block: sumi[k] lane n = sum_j sc_j <q_j, x_j> and summ[k] lane n =
 * sum_j m_j bsum_j for weight row n, the integers of the 256-bit code. A lane gets 16
 * values of a sub-block (4 x 4 x 15 x 127 = 30480 at most), so it fits an int16 word: one
 * vpackssdw puts the sums of sub-blocks 2p and 2p + 1 side by side as words, and one
 * vpdpwssd multiplies all of them by their scales and adds each row's two halves of a
 * sub-block (word pairs), where two vpdpwssd did half as much: one thread, a 2048 x 1536
 * matrix in L2, best of 1500 calls, AMD EPYC Zen 4: 16 rows 138 -> 145 GMAC/s, 4 rows 121 ->
 * 126. (The same packing for Q6_K measured 2 % slower there, so Q6_K keeps one vpdpwssd a sub-block sum.) */
SF_ALWAYS_INLINE void q4_K_x8_ints_zmm(const sf_block_q4_K_x8 *g, const sf_act_k *const *x, int R, int64_t i,
                                       __m256i sc03, __m256i sc47, __m256i mn03, __m256i mn47,
                                       __m256i *sumi, __m256i *summ) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i scz[2] = {lane_pairs(sc03), lane_pairs(sc47)};
    __m512i sz[SF_X8K_RMAX];
    for (int k = 0; k < R; k++) sz[k] = _mm512_setzero_si512();
    _Pragma("GCC unroll 8")
    for (int p = 0; p < 4; p++) {  /* sub-blocks 2p (low nibbles) and 2p + 1 (high) */
        /* the 4 loads of the pair held in registers while the rows pass, so that a row
         * needs one register (its sum), not three: 16 rows fit the 32 registers */
        __m512i lo[4], hi[4];
        for (int q = 0; q < 4; q++) {
            const __m512i W = interleave_quads(_mm512_loadu_si512(g->qs[8 * p + 2 * q]));
            lo[q] = _mm512_and_si512(W, m4);
            hi[q] = _mm512_and_si512(_mm512_srli_epi16(W, 4), m4);
        }
        const __m512i sc = _mm512_shuffle_epi8(scz[p / 2], PACKED_SCALES((2 * p) % 4, (2 * p + 1) % 4));
        for (int k = 0; k < R; k++) {
            const int8_t *xq = x[k][i].qs + 64 * p;
            __m512i alo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[0], bcast64(xq));
            __m512i ahi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi[0], bcast64(xq + 32));
            for (int q = 1; q < 4; q++) {
                alo = _mm512_dpbusd_epi32(alo, lo[q], bcast64(xq + 8 * q));
                ahi = _mm512_dpbusd_epi32(ahi, hi[q], bcast64(xq + 32 + 8 * q));
            }
            sz[k] = _mm512_dpwssd_epi32(sz[k], _mm512_packs_epi32(alo, ahi), sc);
        }
    }
    /* mins: lane 2n (m_2t, m_2t) . (bsum 4t, 4t + 1), lane 2n + 1 (m_2t+1, m_2t+1) . (bsum 4t + 2, 4t + 3) */
    const __m512i mnz[2] = {lane_pairs(mn03), lane_pairs(mn47)};
    const __m512i mt[4] = {_mm512_shuffle_epi8(mnz[0], PAIR_WORDS(0, 1)), _mm512_shuffle_epi8(mnz[0], PAIR_WORDS(2, 3)),
                           _mm512_shuffle_epi8(mnz[1], PAIR_WORDS(0, 1)), _mm512_shuffle_epi8(mnz[1], PAIR_WORDS(2, 3))};
    for (int k = 0; k < R; k++) {
        const int16_t *bs = x[k][i].bsums;
        __m512i m = _mm512_madd_epi16(mt[0], bcast64(bs));
        for (int t = 1; t < 4; t++) m = _mm512_dpwssd_epi32(m, mt[t], bcast64(bs + 4 * t));
        sumi[k] = packed_row_sum(sz[k]);
        summ[k] = pair_sum(m);
    }
}
#endif

/* One lane per weight row: a 32-byte load holds 4 values of each of 8 rows, met by the same
 * 4 activation bytes in every lane. Sub-block j's sum for row n then builds up in lane n
 * (AVX2: maddubs pairs added as int16, <= 8*2*15*127 = 30480; AVX-512: 64-byte loads,
 * q4_K_x8_ints_zmm), and its scale multiplies once per 8 rows. The mins term
 * sum_j m_j * bsum_j comes from int16 pairs (m_2p, m_2p+1) . (bsum_2p, bsum_2p+1).
 * Integers are exact and each lane's float steps are sf_q4k_term's, so row n of a group
 * gives the bits of the plain Q4_K kernels and the reference. */
SF_ALWAYS_INLINE void dot_q4_K_x8_rows(const sf_block_q4_K_x8 *blk, const sf_act_k *const *x, int R, int64_t nb,
                                       float out[][8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m6 = _mm256_set1_epi8(0x3f), top2 = _mm256_set1_epi8(0x30);
    __m256 acc[SF_X8K_RMAX][8];  /* [row k][lane i % 8], one float per weight row */
    for (int k = 0; k < R; k++)
        for (int b = 0; b < 8; b++) acc[k][b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const sf_block_q4_K_x8 *g = &blk[i];
        prefetch_ahead(g, sizeof *g, R);
        /* sf_q4k_scales on 8 rows at once: byte b of lane n = scale (or min) b of row n */
        const __m256i u0 = loadu(g->sc[0]), u1 = loadu(g->sc[1]), u2 = loadu(g->sc[2]);
        const __m256i sc03 = _mm256_and_si256(u0, m6), mn03 = _mm256_and_si256(u1, m6);
        const __m256i sc47 = _mm256_or_si256(_mm256_and_si256(u2, m4), _mm256_and_si256(_mm256_srli_epi32(u0, 2), top2));
        const __m256i mn47 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4),
                                             _mm256_and_si256(_mm256_srli_epi32(u1, 2), top2));
        __m256i sumi[SF_X8K_RMAX], summ[SF_X8K_RMAX];
#if SF_X86_VNNI
        q4_K_x8_ints_zmm(g, x, R, i, sc03, sc47, mn03, mn47, sumi, summ);
#else
        for (int k = 0; k < R; k++) sumi[k] = _mm256_setzero_si256();
        /* Unrolled in full: GCC 12 otherwise copies each row's accumulators between
         * registers on every step of the loops (two moves per multiply-add) and builds the
         * scale shuffles at run time. One-off probe (AMD EPYC, avx512_vnni, one thread,
         * 1536 x 17920 Q4_K, five alternating runs): 22.5 -> 18.2 ms at 64 rows, 0.6 ->
         * 0.5 ms at one. The Q6_K loops below spill when unrolled and gained nothing. */
        _Pragma("GCC unroll 8")
        for (int p = 0; p < 4; p++) {  /* sub-blocks 2p (low nibbles) and 2p + 1 (high) */
            const __m256i sc = p < 2 ? sc03 : sc47;
            __m256i alo[SF_X8K_RMAX], ahi[SF_X8K_RMAX];
            for (int k = 0; k < R; k++) alo[k] = ahi[k] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int q = 0; q < 8; q++) {
                const __m256i W = loadu(g->qs[8 * p + q]);
                const __m256i lo = _mm256_and_si256(W, m4), hi = _mm256_and_si256(_mm256_srli_epi16(W, 4), m4);
                for (int k = 0; k < R; k++) {
                    const int8_t *xq = x[k][i].qs + 64 * p + 4 * q;
                    add_quads(&alo[k], &ahi[k], lo, hi, xq, 32);
                }
            }
            const int jl = (2 * p) % 4, jh = (2 * p + 1) % 4;  /* byte of sc03 / sc47 */
            const __m256i slo = _mm256_shuffle_epi8(sc, LANE_WORDS(jl, jl)), shi = _mm256_shuffle_epi8(sc, LANE_WORDS(jh, jh));
            for (int k = 0; k < R; k++)
                sumi[k] = _mm256_add_epi32(sumi[k], _mm256_add_epi32(_mm256_madd_epi16(alo[k], slo),
                                                                     _mm256_madd_epi16(ahi[k], shi)));
        }
        const __m256i m01 = _mm256_shuffle_epi8(mn03, LANE_WORDS(0, 1)), m23 = _mm256_shuffle_epi8(mn03, LANE_WORDS(2, 3));
        const __m256i m45 = _mm256_shuffle_epi8(mn47, LANE_WORDS(0, 1)), m67 = _mm256_shuffle_epi8(mn47, LANE_WORDS(2, 3));
        for (int k = 0; k < R; k++) {
            /* int32 lane j = bsum of sub-block j; as int16 pairs, 32-bit element 0, 1 of each half */
            const __m256i bs = _mm256_madd_epi16(loadu(x[k][i].bsums), _mm256_set1_epi16(1));
            const __m256i pk = _mm256_packs_epi32(bs, bs);
            summ[k] = _mm256_add_epi32(
                _mm256_add_epi32(_mm256_madd_epi16(m01, _mm256_permutevar8x32_epi32(pk, _mm256_set1_epi32(0))),
                                 _mm256_madd_epi16(m23, _mm256_permutevar8x32_epi32(pk, _mm256_set1_epi32(1)))),
                _mm256_add_epi32(_mm256_madd_epi16(m45, _mm256_permutevar8x32_epi32(pk, _mm256_set1_epi32(4))),
                                 _mm256_madd_epi16(m67, _mm256_permutevar8x32_epi32(pk, _mm256_set1_epi32(5)))));
        }
#endif
        const __m256 d = fp16x8(g->d), dmin = fp16x8(g->dmin);
        for (int k = 0; k < R; k++) {
            /* sf_q4k_term, 8 rows: (d * xd) * (float) sumi - (dmin * xd) * (float) summ */
            const __m256 xd = _mm256_set1_ps(x[k][i].d);
            const __m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_mul_ps(d, xd), _mm256_cvtepi32_ps(sumi[k])),
                                           _mm256_mul_ps(_mm256_mul_ps(dmin, xd), _mm256_cvtepi32_ps(summ[k])));
            acc[k][i % 8] = _mm256_add_ps(acc[k][i % 8], t);
        }
    }
    fold_lanes(acc, R, out);
}

ROWS_X8K(rows_q4_K_x8, dot_q4_K_x8_rows, sf_block_q4_K_x8, sf_act_k, SF_QKK)

/* ---- Q6_K repacked 8 rows by 8 (sf_block_q6_K_x8) ---- */

/* As dot_q4_K_x8_rows, with Q6_K's 16-value sub-blocks and signed scales: quads v, v + 16,
 * v + 32 and v + 48 come out of two low-bit planes and one high-bit plane; sum_g s_g * <q_g - 32, x_g> is
 * sum_g s_g * <q_g, x_g> - 32 * sum_g s_g * bsum_g (q in 0..63: VNNI sums 16 values in
 * int32; AVX2 adds two maddubs results, <= 2*2*63*127 = 32004, as int16). */
#if SF_X86_VNNI
/* Q6_K x8, one super-block, 512 bits: si[k] lane n = sum_g s_g <q_g - 32, x_g> for weight
 * row n. Quads v and v + 1 (of the same 16-value sub-block) go in lanes 2n, 2n + 1 as in
 * q4_K_x8_ints_zmm; a lane's vpdpbusd (4 x 63 x 127 = 32004 at most) fits an int16 word, so
 * vpdpwssd multiplies it by the scale and adds it in one step. */
SF_ALWAYS_INLINE void q6_K_x8_ints_zmm(const sf_block_q6_K_x8 *g, const sf_act_k *const *x, int R, int64_t i,
                                       __m256i *si) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30), low16 = _mm512_set1_epi32(0xffff);
    __m512i sz[SF_X8K_RMAX];
    for (int k = 0; k < R; k++) sz[k] = _mm512_setzero_si512();
    for (int v = 0; v < 16; v += 2) {  /* quads v, v + 1 of planes t: sub-block v / 4 + 4t */
#define SF_PLANES(j) _mm512_inserti64x4(_mm512_castsi256_si512(loadu(g->q[v][j])), loadu(g->q[v + 1][j]), 1)
        const __m512i L0 = SF_PLANES(0), L1 = SF_PLANES(1), H = SF_PLANES(2);
#undef SF_PLANES
        __m512i q[4];
        q[0] = _mm512_or_si512(_mm512_and_si512(L0, m4), _mm512_and_si512(_mm512_slli_epi16(H, 4), m2));
        q[1] = _mm512_or_si512(_mm512_and_si512(L1, m4), _mm512_and_si512(_mm512_slli_epi16(H, 2), m2));
        q[2] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L0, 4), m4), _mm512_and_si512(H, m2));
        q[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L1, 4), m4), _mm512_and_si512(_mm512_srli_epi16(H, 2), m2));
        for (int t = 0; t < 4; t++) {
            const __m512i qt = interleave_quads(q[t]);
            /* (s_n, 0) words in lanes 2n and 2n + 1 */
            const __m128i s8 = _mm_loadl_epi64((const __m128i *)g->scales[v / 4 + 4 * t]);
            const __m512i sc = _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_unpacklo_epi8(s8, s8)), low16);
            for (int k = 0; k < R; k++) {
                const __m512i a = _mm512_dpbusd_epi32(_mm512_setzero_si512(), qt, bcast64(x[k][i].qs + 4 * (v + 16 * t)));
                sz[k] = _mm512_dpwssd_epi32(sz[k], a, sc);
            }
        }
    }
    /* 32 * sum_g s_g bsum_g: lane 2n (s_gg, s_gg+1) . (bsum gg, gg + 1), lane 2n + 1 the same for gg + 2 */
    const __m512i pick = _mm512_set_epi16(31, 23, 15, 7, 30, 22, 14, 6, 29, 21, 13, 5, 28, 20, 12, 4,
                                          27, 19, 11, 3, 26, 18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0);
    __m512i s[4];
    for (int j = 0; j < 4; j++) s[j] = _mm512_permutexvar_epi16(pick, _mm512_cvtepi8_epi16(loadu(g->scales[4 * j])));
    for (int k = 0; k < R; k++) {
        __m512i c = _mm512_madd_epi16(s[0], bcast64(x[k][i].bsums));
        for (int j = 1; j < 4; j++) c = _mm512_dpwssd_epi32(c, s[j], bcast64(x[k][i].bsums + 4 * j));
        si[k] = pair_sum(_mm512_sub_epi32(sz[k], _mm512_slli_epi32(c, 5)));
    }
}
#endif

SF_ALWAYS_INLINE void dot_q6_K_x8_rows(const sf_block_q6_K_x8 *blk, const sf_act_k *const *x, int R, int64_t nb,
                                       float out[][8]) {
    __m256 acc[SF_X8K_RMAX][8];
    for (int k = 0; k < R; k++)
        for (int b = 0; b < 8; b++) acc[k][b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const sf_block_q6_K_x8 *g = &blk[i];
        prefetch_ahead(g, sizeof *g, R);
        __m256i si[SF_X8K_RMAX];
#if SF_X86_VNNI
        q6_K_x8_ints_zmm(g, x, R, i, si);
#else
        const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
        __m256i sumi[SF_X8K_RMAX];
        for (int k = 0; k < R; k++) sumi[k] = _mm256_setzero_si256();
        for (int gp = 0; gp < 4; gp++) {  /* sub-blocks gp, gp + 4, gp + 8, gp + 12 */
            __m256i a[4][SF_X8K_RMAX];
            for (int t = 0; t < 4; t++)
                for (int k = 0; k < R; k++) a[t][k] = _mm256_setzero_si256();
            for (int v = 4 * gp; v < 4 * gp + 4; v++) {
                const __m256i L0 = loadu(g->q[v][0]), L1 = loadu(g->q[v][1]), H = loadu(g->q[v][2]);
                __m256i q[4];  /* quads v, v + 16, v + 32, v + 48: sub-blocks gp + 4t */
                q[0] = _mm256_or_si256(_mm256_and_si256(L0, m4), _mm256_and_si256(_mm256_slli_epi16(H, 4), m2));
                q[1] = _mm256_or_si256(_mm256_and_si256(L1, m4), _mm256_and_si256(_mm256_slli_epi16(H, 2), m2));
                q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L0, 4), m4), _mm256_and_si256(H, m2));
                q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(L1, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(H, 2), m2));
                for (int t = 0; t < 4; t++)
                    for (int k = 0; k < R; k++)
                        a[t][k] = _mm256_add_epi16(a[t][k], _mm256_maddubs_epi16(q[t], bcast32(x[k][i].qs + 4 * (v + 16 * t))));
                if (v % 2 == 1) {  /* two quads in int16, then one madd per sub-block and row */
                    for (int t = 0; t < 4; t++) {
                        const __m256i s32 = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)g->scales[gp + 4 * t]));
                        const __m256i s16 = _mm256_blend_epi16(s32, _mm256_slli_epi32(s32, 16), 0xaa);
                        for (int k = 0; k < R; k++) {
                            sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(a[t][k], s16));
                            a[t][k] = _mm256_setzero_si256();
                        }
                    }
                }
            }
        }
        /* 32 * sum_g s_g * bsum_g: scale pairs (s_g, s_g+1) of each row as int16 words */
        __m256i corr[SF_X8K_RMAX];
        for (int k = 0; k < R; k++) corr[k] = _mm256_setzero_si256();
        for (int gg = 0; gg < 16; gg += 2) {
            const __m128i pair = _mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)g->scales[gg]),
                                                   _mm_loadl_epi64((const __m128i *)g->scales[gg + 1]));
            const __m256i s = _mm256_cvtepi8_epi16(pair);
            for (int k = 0; k < R; k++) {
                int32_t bs;
                memcpy(&bs, &x[k][i].bsums[gg], sizeof bs);
                corr[k] = _mm256_add_epi32(corr[k], _mm256_madd_epi16(s, _mm256_set1_epi32(bs)));
            }
        }
        for (int k = 0; k < R; k++) si[k] = _mm256_sub_epi32(sumi[k], _mm256_slli_epi32(corr[k], 5));
#endif
        const __m256 d = fp16x8(g->d);
        for (int k = 0; k < R; k++) {
            /* sf_q6k_term, 8 rows: (d * xd) * (float) sumi */
            const __m256 t = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[k][i].d)), _mm256_cvtepi32_ps(si[k]));
            acc[k][i % 8] = _mm256_add_ps(acc[k][i % 8], t);
        }
    }
    fold_lanes(acc, R, out);
}

ROWS_X8K(rows_q6_K_x8, dot_q6_K_x8_rows, sf_block_q6_K_x8, sf_act_k, SF_QKK)

/* ---- Q8_0, Q5_0 and Q4_0 repacked 8 rows by 8 ---- */

/* the sum of a block's 32 activations, in every lane */
static inline __m256i act_sum32(const int8_t *xq) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_set1_epi8(1), loadu(xq));
    return _mm256_set1_epi32(hsum_i32(_mm256_madd_epi16(p, _mm256_set1_epi16(1))));
}

/* Q5_0's fifth bits of quad c (values 4c..4c+3) of every row as 0x10 bytes */
static inline __m256i q5_0_high(__m256i qh, int c) {
    const char k = (char)(c / 2);
    const __m256i spread = _mm256_shuffle_epi8(qh, _mm256_setr_epi8(k, k, k, k, 4 + k, 4 + k, 4 + k, 4 + k, 8 + k, 8 + k, 8 + k, 8 + k,
                                                                    12 + k, 12 + k, 12 + k, 12 + k, k, k, k, k, 4 + k, 4 + k, 4 + k, 4 + k,
                                                                    8 + k, 8 + k, 8 + k, 8 + k, 12 + k, 12 + k, 12 + k, 12 + k));
    const int o = 4 * (c % 2);
    const __m256i bit = _mm256_set1_epi32((int)((1u << o) | (2u << (o + 8)) | (4u << (o + 16)) | (8u << (o + 24))));
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

/* As the K-quant x8 kernels, for 32-value blocks: lane n = weight row n, sf_q32_term per
 * block. Q8_0: VNNI takes w + 128 as u8 and subtracts 128 * sum(x); AVX2 uses maddubs'
 * sign trick (|w| * (x * sign w), <= 2*128*127 per pair). Q5_0: q in 0..31, minus 16 * sum(x)
 * (AVX2: four quads of maddubs pairs as int16, <= 4*2*31*127 = 31496); Q4_0 the same with
 * q in 0..15, minus 8 * sum(x). */
#if SF_X86_VNNI
/* Q8_0 / Q5_0 / Q4_0 x8, one block, 512 bits: sumi[k] lane n = <w_n, x_k> for weight row n.
 * The weights go in unsigned (Q8_0 as w + 128, Q5_0 as q = w + 16, Q4_0 as q = w + 8), and the offset times the
 * block's activation sum comes off through a vpdpbusd of the offset byte against the same
 * activation quads (no horizontal sum a row and block). u[t] holds quads 2j, 2j + 1 of the
 * 8 rows in lane pairs (interleave_quads) and meets activations 8t..8t+7: Q8_0 t = j; Q5_0's
 * low nibbles t = j and high ones (values 16..31) t = 2 + j, whose fifth bits are byte t of
 * each row's qh (bits 0..3 for the even lane's quad, 4..7 for the odd one's). One-row draft
 * steps are most of what these run, and at one row the unpacking is the cost: 16 lanes a
 * step halve it. */
SF_ALWAYS_INLINE void q32_x8_ints_zmm(const uint8_t *g, const sf_act_32 *const *x, int R, int64_t i, int kind,
                                      __m256i *sumi) {
    __m512i u[4];
    if (kind == SF_W_Q8_0) {
        const sf_block_q8_0_x8 *b8 = (const sf_block_q8_0_x8 *)g;
        for (int t = 0; t < 4; t++)
            u[t] = _mm512_xor_si512(interleave_quads(_mm512_loadu_si512(b8->qs[2 * t])), _mm512_set1_epi8((char)0x80));
    } else {  /* Q5_0 and Q4_0: the same nibbles; Q5_0 adds its fifth bits */
        const uint8_t(*qs)[32] = kind == SF_W_Q5_0 ? ((const sf_block_q5_0_x8 *)g)->qs : ((const sf_block_q4_0_x8 *)g)->qs;
        const __m512i m4 = _mm512_set1_epi8(0x0f), bits = _mm512_set1_epi64((int64_t)0x8040201008040201ULL);
        for (int j = 0; j < 2; j++) {
            const __m512i W = interleave_quads(_mm512_loadu_si512(qs[2 * j]));
            u[j] = _mm512_and_si512(W, m4);
            u[2 + j] = _mm512_and_si512(_mm512_srli_epi16(W, 4), m4);
        }
        if (kind == SF_W_Q5_0) {
            const __m512i qh = lane_pairs(loadu(((const sf_block_q5_0_x8 *)g)->qh));
            for (int t = 0; t < 4; t++) {
                const char a = (char)t, b = (char)(4 + t), c = (char)(8 + t), e = (char)(12 + t);
                const __m512i spread = _mm512_shuffle_epi8(qh, _mm512_broadcast_i32x4(
                    _mm_setr_epi8(a, a, a, a, b, b, b, b, c, c, c, c, e, e, e, e)));
                u[t] = _mm512_mask_add_epi8(u[t], _mm512_test_epi8_mask(spread, bits), u[t], _mm512_set1_epi8(0x10));
            }
        }
    }
    const __m512i offset = _mm512_set1_epi8(kind == SF_W_Q8_0 ? (char)0x80 : kind == SF_W_Q5_0 ? 0x10 : 0x08);
    for (int k = 0; k < R; k++) {
        __m512i s = _mm512_setzero_si512(), o = _mm512_setzero_si512();
        for (int t = 0; t < 4; t++) {
            const __m512i xb = bcast64(x[k][i].qs + 8 * t);
            s = _mm512_dpbusd_epi32(s, u[t], xb);
            o = _mm512_dpbusd_epi32(o, offset, xb);
        }
        sumi[k] = pair_sum(_mm512_sub_epi32(s, o));
    }
}
#endif

SF_ALWAYS_INLINE void dot_q32_x8_rows(const uint8_t *blk, const sf_act_32 *const *x, int R, int64_t nb,
                                      float out[][8], int kind) {
    const size_t bsize = kind == SF_W_Q8_0 ? sizeof(sf_block_q8_0_x8)
                       : kind == SF_W_Q5_0 ? sizeof(sf_block_q5_0_x8) : sizeof(sf_block_q4_0_x8);
    __m256 acc[SF_X8_RMAX][8];
    for (int k = 0; k < R; k++)
        for (int b = 0; b < 8; b++) acc[k][b] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *g = blk + (size_t)i * bsize;
        prefetch_ahead(g, bsize, R);
        __m256i sumi[SF_X8_RMAX];
#if SF_X86_VNNI
        q32_x8_ints_zmm(g, x, R, i, kind, sumi);
#else
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        if (kind == SF_W_Q8_0) {
            const sf_block_q8_0_x8 *b8 = (const sf_block_q8_0_x8 *)g;
            for (int k = 0; k < R; k++) sumi[k] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int q = 0; q < 8; q++) {
                const __m256i W = loadu(b8->qs[q]);
                const __m256i A = _mm256_abs_epi8(W);
                for (int k = 0; k < R; k++)
                    sumi[k] = _mm256_add_epi32(sumi[k], _mm256_madd_epi16(
                        _mm256_maddubs_epi16(A, _mm256_sign_epi8(bcast32(x[k][i].qs + 4 * q), W)), _mm256_set1_epi16(1)));
            }
        } else {  /* Q5_0 and Q4_0: the same nibbles; Q5_0 adds its fifth bits */
            const int five = kind == SF_W_Q5_0;
            const uint8_t(*qs)[32] = five ? ((const sf_block_q5_0_x8 *)g)->qs : ((const sf_block_q4_0_x8 *)g)->qs;
            const __m256i qh = five ? loadu(((const sf_block_q5_0_x8 *)g)->qh) : _mm256_setzero_si256();
            __m256i alo[SF_X8_RMAX], ahi[SF_X8_RMAX];
            for (int k = 0; k < R; k++) alo[k] = ahi[k] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int q = 0; q < 4; q++) {
                const __m256i P = loadu(qs[q]);
                __m256i lo = _mm256_and_si256(P, m4), hi = _mm256_and_si256(_mm256_srli_epi16(P, 4), m4);
                if (five) {
                    lo = _mm256_or_si256(lo, q5_0_high(qh, q));
                    hi = _mm256_or_si256(hi, q5_0_high(qh, q + 4));
                }
                for (int k = 0; k < R; k++) {
                    const int8_t *xq = x[k][i].qs + 4 * q;
                    add_quads(&alo[k], &ahi[k], lo, hi, xq, 16);
                }
            }
            for (int k = 0; k < R; k++) {
                const __m256i s = _mm256_add_epi32(_mm256_madd_epi16(alo[k], _mm256_set1_epi16(1)),
                                                   _mm256_madd_epi16(ahi[k], _mm256_set1_epi16(1)));
                sumi[k] = _mm256_sub_epi32(s, _mm256_slli_epi32(act_sum32(x[k][i].qs), five ? 4 : 3));
            }
        }
#endif
        uint16_t dh[8];
        memcpy(dh, g, sizeof dh);  /* d[8] leads both layouts */
        const __m256 d = fp16x8(dh);
        for (int k = 0; k < R; k++) {
            /* sf_q32_term, 8 rows: (d_w * d_x) * (float) sumi */
            const __m256 t = _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(x[k][i].d)), _mm256_cvtepi32_ps(sumi[k]));
            acc[k][i % 8] = _mm256_add_ps(acc[k][i % 8], t);
        }
    }
    fold_lanes(acc, R, out);
}

SF_ALWAYS_INLINE void dot_q8_0_x8_rows(const sf_block_q8_0_x8 *blk, const sf_act_32 *const *x, int R, int64_t nb,
                                       float out[][8]) {
    dot_q32_x8_rows((const uint8_t *)blk, x, R, nb, out, SF_W_Q8_0);
}

SF_ALWAYS_INLINE void dot_q5_0_x8_rows(const sf_block_q5_0_x8 *blk, const sf_act_32 *const *x, int R, int64_t nb,
                                       float out[][8]) {
    dot_q32_x8_rows((const uint8_t *)blk, x, R, nb, out, SF_W_Q5_0);
}

ROWS_X8(rows_q8_0_x8, dot_q8_0_x8_rows, sf_block_q8_0_x8, sf_act_32, SF_QK32)
SF_ALWAYS_INLINE void dot_q4_0_x8_rows(const sf_block_q4_0_x8 *blk, const sf_act_32 *const *x, int R, int64_t nb,
                                       float out[][8]) {
    dot_q32_x8_rows((const uint8_t *)blk, x, R, nb, out, SF_W_Q4_0);
}

ROWS_X8(rows_q5_0_x8, dot_q5_0_x8_rows, sf_block_q5_0_x8, sf_act_32, SF_QK32)
ROWS_X8(rows_q4_0_x8, dot_q4_0_x8_rows, sf_block_q4_0_x8, sf_act_32, SF_QK32)

/* ---- Q6_K ---- */

/* sum_g scale_g * <q_g - 32, x_g> of one super-block, as sum scale*<q, x> - 32 sum scale*bsum;
 * q in 0..63 x int8 in maddubs cannot saturate (2*63*127). */
SF_ALWAYS_INLINE void dot_q6_K_rows(const sf_block_q6_K *row, const sf_act_k *const *x, int R, int64_t nb,
                                    float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[SF_X86_RMAX];
    for (int k = 0; k < R; k++) acc[k] = _mm256_setzero_ps();
    for (int64_t i0 = 0; i0 < nb; i0 += 8) {
        const int n = nb - i0 < 8 ? (int)(nb - i0) : 8;
        __m256i part[SF_X86_RMAX][8];
        uint16_t dh[8] = {0};
        for (int b = 0; b < n; b++) {
            const sf_block_q6_K *blk = &row[i0 + b];
            prefetch_ahead(blk, sizeof *blk, R);
            const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales));
            __m256i sum[SF_CHAINS_MAX][SF_X86_RMAX];
            for (int a = 0; a < SF_CHAINS(R); a++)
                for (int k = 0; k < R; k++) sum[a][k] = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const __m256i A = loadu(blk->ql + 64 * h), B = loadu(blk->ql + 64 * h + 32), H = loadu(blk->qh + 32 * h);
                /* scales 8h..8h+7 in both lanes */
                const __m256i sc = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
                __m256i q[4];
                q[0] = _mm256_or_si256(_mm256_and_si256(A, m4), _mm256_slli_epi16(_mm256_and_si256(H, _mm256_set1_epi8(0x03)), 4));
                q[1] = _mm256_or_si256(_mm256_and_si256(B, m4), _mm256_slli_epi16(_mm256_and_si256(H, _mm256_set1_epi8(0x0c)), 2));
                q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(A, 4), m4), _mm256_and_si256(H, _mm256_set1_epi8(0x30)));
                q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(B, 4), m4),
                                       _mm256_and_si256(_mm256_srli_epi16(H, 2), _mm256_set1_epi8(0x30)));
                for (int j = 0; j < 4; j++) {
                    /* values 128h + 32j..: groups 8h + 2j (low lane) and 8h + 2j + 1 (high lane) */
                    const char a = (char)(4 * j), c = (char)(4 * j + 2);
                    const __m256i pick = _mm256_setr_epi8(a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1, a, a + 1,
                                                          c, c + 1, c, c + 1, c, c + 1, c, c + 1, c, c + 1, c, c + 1, c, c + 1, c, c + 1);
                    const __m256i s = _mm256_shuffle_epi8(sc, pick);
                    const int chain = (4 * h + j) % SF_CHAINS(R);
                    for (int k = 0; k < R; k++)
                        sum[chain][k] = SF_MADD_ADD(sum[chain][k], _mm256_maddubs_epi16(q[j], loadu(x[k][i0 + b].qs + 128 * h + 32 * j)), s);
                }
            }
            /* minus 32 * sum_g scale_g * bsum_g, still exact in int32 lanes */
            for (int k = 0; k < R; k++)
                part[k][b] = _mm256_sub_epi32(chains_sum(sum, SF_CHAINS(R), k),
                                              _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu(x[k][i0 + b].bsums)), 5));
            dh[b] = sf_u16(&blk->d);
        }
        for (int b = n; b < 8; b++)
            for (int k = 0; k < R; k++) part[k][b] = _mm256_setzero_si256();
        const __m256 d = fp16x8(dh);
        for (int k = 0; k < R; k++) {
            /* sf_q6k_term, 8 blocks: (d * xd) * (float) sumi */
            const __m256 t = _mm256_mul_ps(_mm256_mul_ps(d, act_scales(x[k], i0, n)), _mm256_cvtepi32_ps(hsum8_i32(part[k])));
            acc[k] = add_lanes(acc[k], t, n);
        }
    }
    store_lanes_sum(acc, R, out);
}

ROWS_BY_R(rows_q6_K, dot_q6_K_rows, sf_block_q6_K)

/* the wide products: avx512.c's x86_wide.h and avx2.c's avx2_wide.h set them; without them
 * sf_matmul keeps the x8 kernels */
#ifndef SF_X86_WIDE_OPS
#define SF_X86_WIDE_OPS .wide_tile = NULL, .wide_rows = NULL
#endif
#ifndef SF_X86_WIDE32_OPS
#define SF_X86_WIDE32_OPS .wide32_tile = NULL, .wide32_rows = NULL
#endif

#define SF_X86_KERNELS(NAME)                                                                   \
    {                                                                                          \
        .name = NAME, .quant_k = quant_k, .quant_32 = quant_32, .q8_0 = rows_q8_0,             \
        .q5_0 = rows_q5_0, .q4_0 = rows_q4_0, .q4_K = rows_q4_K, .q6_K = rows_q6_K,            \
        .q8_0_x8 = rows_q8_0_x8, .q5_0_x8 = rows_q5_0_x8, .q4_0_x8 = rows_q4_0_x8, .q4_K_x8 = rows_q4_K_x8,            \
        .q6_K_x8 = rows_q6_K_x8, SF_LAYER_OPS, .dot_loop = dot_peak_loop, .dot_forms = SF_DOT_FORMS, SF_X86_WIDE_OPS, \
        SF_X86_WIDE32_OPS,                                                                     \
    }

#endif /* SF_X86_BODY_H */
