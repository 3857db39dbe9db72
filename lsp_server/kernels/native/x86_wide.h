/* The wide products on AVX-512 VNNI (blocks.h sf_wide_block), included by avx512.c after
 * x86_body.h: bit for bit ref.c's ref_wide_tile and ref_wide_rows. The tile's values are
 * the reference dequantizer's floats (the same multiply and subtract, lane by lane) and the
 * activation quantizer's rounding (sf_act_scale's d and 1 / d, cvtps in the current mode as
 * nearbyintf); the products are exact integers and the same float steps per super-block. */
#ifndef SF_X86_WIDE_H
#define SF_X86_WIDE_H


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
    float amax[8], id[8], d[8];
    int zero[8];
    for (int h = 0; h < 2; h++) {
        __m512 m = vmax[h];
        m = _mm512_max_ps(m, _mm512_permute_ps(m, 0xb1));  /* max within each 128-bit lane: one row */
        m = _mm512_max_ps(m, _mm512_permute_ps(m, 0x4e));
        float lanes[16];
        _mm512_storeu_ps(lanes, m);
        for (int n = 0; n < 4; n++) amax[4 * h + n] = lanes[4 * n];
    }
    for (int n = 0; n < 8; n++) {
        int8_t none;
        zero[n] = !sf_act_scale(amax[n], 0, 0, &none, &d[n], &id[n]);
        if (zero[n]) id[n] = 0.0f;
        t->d[base + n] = d[n];
    }
    const __m512 ida = rows4(id), idb = rows4(id + 4);
    const __m128i flip = _mm_set1_epi8((char)0x80);
    for (int j = 0; j < SF_QKK / 4; j++) {
        const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w->v[j]), ida));
        const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(w->v[j] + 16), idb));
        _mm_storeu_si128((__m128i *)&t->q[j][base][0], _mm_xor_si128(_mm512_cvtsepi32_epi8(qa), flip));
        _mm_storeu_si128((__m128i *)&t->q[j][base + 4][0], _mm_xor_si128(_mm512_cvtsepi32_epi8(qb), flip));
    }
    for (int n = 0; n < 8; n++)  /* tiny rows: q = 0 */
        if (zero[n])
            for (int j = 0; j < SF_QKK / 4; j++) memset(t->q[j][base + n], 128, 4);
}

/* 16 values (4 rows x 4) of the reference dequantizer's (s * q - m; Q6_K: s * q), kept with
 * their running amax: the fast paths run only where every scale of the 8 rows is finite, so
 * no value is a NaN or infinite and no NaN flags are needed (wide_group_slow has the rest) */
static inline void wide_put(struct wide_vals *w, int j, int h, __m512 f, __m512 *vmax) {
    *vmax = _mm512_max_ps(*vmax, _mm512_abs_ps(f));
    _mm512_store_ps(w->v[j] + 16 * h, f);
}

static inline int fp16_finite(uint16_t h) { return (h & 0x7c00) != 0x7c00; }

/* A group's super-block row by row as the reference makes it: for scales that are infinite or NaN */
static void wide_group_slow(int type, const uint8_t *block, sf_wide_block *t, int base) {
    for (int n = 0; n < 8; n++) sf_wide_row(type, block, n, quant_block, t, base + n);
}

static void wide_q4_K_group(const sf_block_q4_K_x8 *g, sf_wide_block *t, int base) {
    for (int n = 0; n < 8; n++)
        if (!fp16_finite(g->d[n]) || !fp16_finite(g->dmin[n])) {
            wide_group_slow(SF_Q4_K_X8, (const uint8_t *)g, t, base);
            return;
        }
    _Alignas(64) float ds[8][8], dm[8][8];  /* [sub-block][row] */
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
    for (int n = 0; n < 8; n++)
        if (!fp16_finite(g->d[n])) {
            wide_group_slow(SF_Q6_K_X8, (const uint8_t *)g, t, base);
            return;
        }
    _Alignas(64) float ds[16][8];  /* [run of 16 values][row] */
    for (int n = 0; n < 8; n++) {
        const float d = sf_fp16_to_fp32(g->d[n]);
        for (int r = 0; r < 16; r++) ds[r][n] = d * (float)g->scales[r][n];
    }
    __m512 dsv[16][2];  /* [run][half] */
    for (int r = 0; r < 16; r++)
        for (int h = 0; h < 2; h++) dsv[r][h] = rows4(ds[r] + 4 * h);
    struct wide_vals w;
    __m512 vmax[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const __m256i low = _mm256_set1_epi8(0x0f), two = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    for (int v = 0; v < 16; v++) {  /* quads v, v + 16, v + 32, v + 48 (sf_block_q6_K_x8) */
        const __m256i p0 = _mm256_loadu_si256((const __m256i *)g->q[v][0]);
        const __m256i p1 = _mm256_loadu_si256((const __m256i *)g->q[v][1]);
        const __m256i p2 = _mm256_loadu_si256((const __m256i *)g->q[v][2]);
        const __m256i lo[4] = {_mm256_and_si256(p0, low), _mm256_and_si256(p1, low),
                               _mm256_and_si256(_mm256_srli_epi16(p0, 4), low),
                               _mm256_and_si256(_mm256_srli_epi16(p1, 4), low)};
        for (int s = 0; s < 4; s++) {  /* quad v + 16 s */
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(p2, 2 * s), two);
            const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo[s], _mm256_slli_epi16(hi, 4)), off);
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

static void wide_tile(int type, const uint8_t *w, size_t wrb, int64_t nb, sf_wide_block *tile) {
    for (int gi = 0; gi < SF_WIDE_ROWS / 8; gi++) {
        const uint8_t *group = w + (size_t)(8 * gi) * wrb;
        for (int64_t i = 0; i < nb; i++) {
            if (type == SF_Q4_K_X8) wide_q4_K_group((const sf_block_q4_K_x8 *)group + i, &tile[i], 8 * gi);
            else wide_q6_K_group((const sf_block_q6_K_x8 *)group + i, &tile[i], 8 * gi);
        }
    }
}

/* ---- products: R activation rows against the tile's 32 rows, two zmm of int32 a row ---- */

/* Rows per pass: 2R int32 and 2R float accumulators + 2 weight registers of 32 */
#define SF_WIDE_R 6

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

static void wide_rows(const sf_wide_block *t, int64_t nb, const uint8_t *xq, size_t xrb, const int32_t *xsum,
                      int64_t M, float *y, int64_t ldy) {
    int64_t m = 0;
    for (; m + SF_WIDE_R <= M; m += SF_WIDE_R)
        wide_rows_r(t, nb, xq + (size_t)m * xrb, xrb, xsum + m * nb, y + m * ldy, ldy, SF_WIDE_R);
    const uint8_t *x = xq + (size_t)m * xrb;
    switch (M - m) {
    case 1: wide_rows_r(t, nb, x, xrb, xsum + m * nb, y + m * ldy, ldy, 1); break;
    case 2: wide_rows_r(t, nb, x, xrb, xsum + m * nb, y + m * ldy, ldy, 2); break;
    case 3: wide_rows_r(t, nb, x, xrb, xsum + m * nb, y + m * ldy, ldy, 3); break;
    case 4: wide_rows_r(t, nb, x, xrb, xsum + m * nb, y + m * ldy, ldy, 4); break;
    case 5: wide_rows_r(t, nb, x, xrb, xsum + m * nb, y + m * ldy, ldy, 5); break;
    default: break;
    }
}

#undef SF_X86_WIDE_OPS
#define SF_X86_WIDE_OPS .wide_tile = wide_tile, .wide_rows = wide_rows

#endif /* SF_X86_WIDE_H */
