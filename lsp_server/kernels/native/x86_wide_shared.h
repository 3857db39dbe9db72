/* What the two x86 wide paths share (x86_wide.h on AVX-512, avx2_wide.h on AVX2), included
 * by each first: the slow path for groups whose scales are not finite, a group's scales as
 * the reference's floats, the tile loop over the groups and the rows' passes. Each path
 * then defines SF_WIDE_R (activation rows a pass), wide_q4_K_group, wide_q6_K_group (a
 * group's values into the tile, on its registers) and wide_rows_r (R rows' products). */
#ifndef SF_X86_WIDE_SHARED_H
#define SF_X86_WIDE_SHARED_H

static inline int fp16_finite(uint16_t h) { return (h & 0x7c00) != 0x7c00; }

/* A group's super-block row by row as the reference makes it: for scales that are infinite or NaN */
static void wide_group_slow(int type, const uint8_t *block, sf_wide_block *t, int base) {
    for (int n = 0; n < 8; n++) sf_wide_row(type, block, n, quant_block, t, base + n);
}

/* ds[j][n] = d * sc[j], dm[j][n] = dmin * mn[j]: sub-block j of row n as the reference's
 * dequantizer scales it; 0 (nothing written) where a row's d or dmin is not finite */
static inline int wide_q4_K_scales(const sf_block_q4_K_x8 *g, float ds[8][8], float dm[8][8]) {
    for (int n = 0; n < 8; n++)
        if (!fp16_finite(g->d[n]) || !fp16_finite(g->dmin[n])) return 0;
    for (int n = 0; n < 8; n++) {
        uint8_t s[12], sc[8], mn[8];
        for (int w = 0; w < 3; w++) memcpy(s + 4 * w, &g->sc[w][n], 4);
        sf_q4k_scales(s, sc, mn);
        const float d = sf_fp16_to_fp32(g->d[n]), dmin = sf_fp16_to_fp32(g->dmin[n]);
        for (int j = 0; j < 8; j++) {
            ds[j][n] = d * (float)sc[j];
            dm[j][n] = dmin * (float)mn[j];
        }
    }
    return 1;
}

/* ds[r][n] = d * scales[r]: run r of 16 values of row n; 0 where a row's d is not finite */
static inline int wide_q6_K_scales(const sf_block_q6_K_x8 *g, float ds[16][8]) {
    for (int n = 0; n < 8; n++)
        if (!fp16_finite(g->d[n])) return 0;
    for (int n = 0; n < 8; n++) {
        const float d = sf_fp16_to_fp32(g->d[n]);
        for (int r = 0; r < 16; r++) ds[r][n] = d * (float)g->scales[r][n];
    }
    return 1;
}

/* quads v, v + 16, v + 32, v + 48 of a Q6_K_X8 group (its line v), 8 rows x 4 values each,
 * as int8 - 32 */
static inline void wide_q6_K_quads(const sf_block_q6_K_x8 *g, int v, __m256i q[4]) {
    const __m256i low = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    const __m256i p0 = _mm256_loadu_si256((const __m256i *)g->q[v][0]);
    const __m256i p1 = _mm256_loadu_si256((const __m256i *)g->q[v][1]);
    const __m256i p2 = _mm256_loadu_si256((const __m256i *)g->q[v][2]);
    const __m256i lo[4] = {_mm256_and_si256(p0, low), _mm256_and_si256(p1, low),
                           _mm256_and_si256(_mm256_srli_epi16(p0, 4), low),
                           _mm256_and_si256(_mm256_srli_epi16(p1, 4), low)};
    for (int s = 0; s < 4; s++) {
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(p2, 2 * s), two);
        q[s] = _mm256_sub_epi8(_mm256_or_si256(lo[s], _mm256_slli_epi16(hi, 4)), off);
    }
}

/* Each of a group's 8 rows' quantizer scale from its amax (sf_act_scale, as the reference
 * quantizes), into the tile at rows base..base+7; id[n] its inverse, 0 for a row that
 * quantizes to zeros (zero[n]) */
static inline void wide_group_scales(const float amax[8], sf_wide_block *t, int base, float id[8], int zero[8]) {
    for (int n = 0; n < 8; n++) {
        int8_t none;
        float d;
        zero[n] = !sf_act_scale(amax[n], 0, 0, &none, &d, &id[n]);
        if (zero[n]) id[n] = 0.0f;
        t->d[base + n] = d;
    }
}

/* tiny rows: q = 0 (stored + 128) */
static inline void wide_zero_rows(sf_wide_block *t, int base, const int zero[8]) {
    for (int n = 0; n < 8; n++)
        if (zero[n])
            for (int j = 0; j < SF_QKK / 4; j++) memset(t->q[j][base + n], 128, 4);
}

static void wide_q4_K_group(const sf_block_q4_K_x8 *g, sf_wide_block *t, int base);
static void wide_q6_K_group(const sf_block_q6_K_x8 *g, sf_wide_block *t, int base);

static void wide_tile(int type, const uint8_t *w, size_t wrb, int64_t nb, sf_wide_block *tile) {
    for (int gi = 0; gi < SF_WIDE_ROWS / 8; gi++) {
        const uint8_t *group = w + (size_t)(8 * gi) * wrb;
        for (int64_t i = 0; i < nb; i++) {
            if (type == SF_Q4_K_X8) wide_q4_K_group((const sf_block_q4_K_x8 *)group + i, &tile[i], 8 * gi);
            else wide_q6_K_group((const sf_block_q6_K_x8 *)group + i, &tile[i], 8 * gi);
        }
    }
}

/* SF_WIDE_ROWS rows of a Q4_0_X8 matrix into nb tile blocks (sf_wide_block_32): each x8
 * group's line q (bytes 4q..4q+3 of its 8 rows' qs) gives quad q (low nibbles) and quad
 * q + 4 (high) of 8 tile rows as they stand, and F16C widens d exactly (a NaN quiet, as
 * sf_fp16_to_fp32). Group by group, so that each streams its blocks in order. */
static void wide32_tile(const uint8_t *w, size_t wrb, int64_t nb, sf_wide_block_32 *tile) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int g = 0; g < SF_WIDE_ROWS / 8; g++) {
        const sf_block_q4_0_x8 *group = (const sf_block_q4_0_x8 *)(w + (size_t)(8 * g) * wrb);
        for (int64_t i = 0; i < nb; i++) {
            const sf_block_q4_0_x8 *b = &group[i];
            _mm256_storeu_ps(tile[i].d + 8 * g, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b->d)));
            for (int q = 0; q < 4; q++) {
                const __m256i line = _mm256_loadu_si256((const __m256i *)b->qs[q]);
                const __m256i high = _mm256_and_si256(_mm256_srli_epi16(line, 4), low);
                _mm256_storeu_si256((__m256i *)tile[i].q[q][8 * g], _mm256_and_si256(line, low));
                _mm256_storeu_si256((__m256i *)tile[i].q[q + 4][8 * g], high);
            }
        }
    }
}

/* The passes of a wide product over its M activation rows, for wide_rows here and
 * wide32_rows (x86_wide32_rows.h): whole passes of R rows through rows_r, then one pass of
 * the rest, each count below R a case of its own so that each compiles once with its count
 * as a constant (R <= 12). It reads the enclosing function's parameters by name: the tile t
 * of nb blocks, the activation rows xq (xrb bytes apart), their per-block sums xs, M, and
 * the output y (ldy apart). */
#define SF_WIDE_REST(rows_r, R, n)                                                                  \
    case n:                                                                                         \
        if ((n) < (R)) rows_r(t, nb, xq + (size_t)m * xrb, xrb, xs + m * nb, y + m * ldy, ldy, (n) < (R) ? (n) : 1); \
        break;
#define SF_WIDE_PASSES(rows_r, R)                                                                   \
    int64_t m = 0;                                                                                  \
    for (; m + (R) <= M; m += (R)) rows_r(t, nb, xq + (size_t)m * xrb, xrb, xs + m * nb, y + m * ldy, ldy, (R)); \
    switch (M - m) {                                                                                \
        SF_WIDE_REST(rows_r, R, 1) SF_WIDE_REST(rows_r, R, 2) SF_WIDE_REST(rows_r, R, 3)            \
        SF_WIDE_REST(rows_r, R, 4) SF_WIDE_REST(rows_r, R, 5) SF_WIDE_REST(rows_r, R, 6)            \
        SF_WIDE_REST(rows_r, R, 7) SF_WIDE_REST(rows_r, R, 8) SF_WIDE_REST(rows_r, R, 9)            \
        SF_WIDE_REST(rows_r, R, 10) SF_WIDE_REST(rows_r, R, 11)                                     \
    default: break;                                                                                 \
    }

SF_ALWAYS_INLINE void wide_rows_r(const sf_wide_block *t, int64_t nb, const uint8_t *xq, size_t xrb,
                                  const int32_t *xsum, float *y, int64_t ldy, const int R);

static void wide_rows(const sf_wide_block *t, int64_t nb, const uint8_t *xq, size_t xrb, const int32_t *xs,
                      int64_t M, float *y, int64_t ldy) {
    SF_WIDE_PASSES(wide_rows_r, SF_WIDE_R)
}

#endif /* SF_X86_WIDE_SHARED_H */
