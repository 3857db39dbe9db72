/* The scalar reference. It defines every result: the activation quantization, the exact
 * integer dot of each block, and the order of every float operation. Each ISA file must
 * give the same bits. Plain C, no ISA assumptions. */
#include "blocks.h"

#include <math.h>

#include "layer_body.h"
#include "specfill_kernels.h"

/* ---- activations ---- */

/* Scale and int8 values of one block of n activations. Finite blocks: d = amax / 127,
 * q = (int8) nearbyintf(x * (1 / d)) (the current rounding mode, round-half-even by
 * default), which never leaves [-127, 127]. A block with a NaN or an infinity gets d = NaN
 * and q = 0, so the NaN reaches every output it touches; a block with amax < SF_ACT_TINY
 * gets d = 0 and q = 0 (1/d would overflow). Returns d. */
static float ref_quant_block(const float *x, int n, int8_t *q) {
    float amax = 0.0f;
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const float a = fabsf(x[i]);
        if (a != a) bad = 1;
        else if (a > amax) amax = a;
    }
    float d, id;
    if (!sf_act_scale(amax, bad, n, q, &d, &id)) return d;
    for (int i = 0; i < n; i++) q[i] = (int8_t)nearbyintf(x[i] * id);
    return d;
}

SF_QUANT_ROWS(ref_quant_k, ref_quant_32, ref_quant_block)

/* ---- the integer value of weight v in a block ---- */

static int q8_0_value(const sf_block_q8_0 *b, int v) { return b->qs[v]; }

static int q5_0_value(const sf_block_q5_0 *b, int v) {
    uint32_t qh;
    memcpy(&qh, b->qh, sizeof qh);
    const int lo = v < 16 ? (b->qs[v] & 0x0f) : (b->qs[v - 16] >> 4);
    return (lo | (int)(((qh >> v) & 1u) << 4)) - 16;
}

static int q4_0_value(const sf_block_q4_0 *b, int v) {
    return (v < 16 ? (b->qs[v] & 0x0f) : (b->qs[v - 16] >> 4)) - 8;
}

static int q4_K_value(const sf_block_q4_K *b, int v) {  /* unsigned nibble, 0..15 */
    const int j = v / 32, l = v % 32;
    const uint8_t byte = b->qs[32 * (j / 2) + l];
    return (j % 2) ? (byte >> 4) : (byte & 0x0f);
}

static int q6_K_value(const sf_block_q6_K *b, int v) {  /* 0..63, before the -32 */
    const int h = v / 128, r = v % 128;
    const uint8_t lo = b->ql[64 * h + r % 64];
    const int nib = (r / 64) ? (lo >> 4) : (lo & 0x0f);
    const int hi = (b->qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    return nib | (hi << 4);
}

/* ---- one weight row . one activation row ---- */

/* the float term of one 32-value block against its activation block */
#define REF_TERM32(NAME, BLOCK, VALUE)                                                     \
    static float NAME(const BLOCK *b, const sf_act_32 *x) {                                 \
        int32_t s = 0;                                                                      \
        for (int v = 0; v < 32; v++) s += VALUE(b, v) * x->qs[v];                           \
        return sf_q32_term(sf_u16(&b->d), x->d, s);                                         \
    }

REF_TERM32(q8_0_term, sf_block_q8_0, q8_0_value)
REF_TERM32(q5_0_term, sf_block_q5_0, q5_0_value)
REF_TERM32(q4_0_term, sf_block_q4_0, q4_0_value)

#define REF_DOT32(NAME, BLOCK, TERM)                                                       \
    static float NAME(const uint8_t *w, const sf_act_32 *x, int64_t nb) {                   \
        float lanes[8] = {0};                                                               \
        for (int64_t i = 0; i < nb; i++) lanes[i % 8] += TERM((const BLOCK *)w + i, &x[i]); \
        return sf_lanes8_sum(lanes);                                                        \
    }

REF_DOT32(dot_q8_0, sf_block_q8_0, q8_0_term)
REF_DOT32(dot_q5_0, sf_block_q5_0, q5_0_term)
REF_DOT32(dot_q4_0, sf_block_q4_0, q4_0_term)

/* K-quant super-block i adds its term to lane i % 8, as the 32-value types do, so that a
 * vector variant keeps eight blocks' float work in one register. */
static float q4_K_term(const sf_block_q4_K *b, const sf_act_k *x) {
    uint8_t sc[8], mn[8];
    sf_q4k_scales(b->scales, sc, mn);
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        int32_t s = 0;
        for (int l = 0; l < 32; l++) s += q4_K_value(b, 32 * j + l) * x->qs[32 * j + l];
        sumi += sc[j] * s;
        summ += mn[j] * (x->bsums[2 * j] + x->bsums[2 * j + 1]);
    }
    return sf_q4k_term(sf_fp16_to_fp32(sf_u16(&b->d)), sf_fp16_to_fp32(sf_u16(&b->dmin)), x->d, sumi, summ);
}

static float dot_q4_K(const uint8_t *w, const sf_act_k *x, int64_t nb) {
    float lanes[8] = {0};
    for (int64_t i = 0; i < nb; i++) lanes[i % 8] += q4_K_term((const sf_block_q4_K *)w + i, &x[i]);
    return sf_lanes8_sum(lanes);
}

static float q6_K_term(const sf_block_q6_K *b, const sf_act_k *x) {
    int32_t sumi = 0;
    for (int g = 0; g < 16; g++) {
        int32_t s = 0;
        for (int l = 0; l < 16; l++) s += (q6_K_value(b, 16 * g + l) - 32) * x->qs[16 * g + l];
        sumi += b->scales[g] * s;
    }
    return sf_q6k_term(sf_fp16_to_fp32(sf_u16(&b->d)), x->d, sumi);
}

static float dot_q6_K(const uint8_t *w, const sf_act_k *x, int64_t nb) {
    float lanes[8] = {0};
    for (int64_t i = 0; i < nb; i++) lanes[i % 8] += q6_K_term((const sf_block_q6_K *)w + i, &x[i]);
    return sf_lanes8_sum(lanes);
}

/* ---- the row loops: n, then m (the weight row stays in L1 for every activation row); the
 * plain layouts' are shared with variants that vectorise only the repacked ones (neon.c) ---- */

#define REF_ROWS(NAME, DOT, ACT, QK)                                                        \
    void NAME(const uint8_t *w, size_t wrb, int64_t nrows, const uint8_t *xq,               \
              size_t xrb, int64_t M, int64_t K, float *y, int64_t ldy) {                    \
        for (int64_t r = 0; r < nrows; r++)                                                 \
            for (int64_t m = 0; m < M; m++)                                                 \
                y[m * ldy + r] = DOT(w + r * wrb, (const ACT *)(xq + m * xrb), K / (QK));   \
    }

REF_ROWS(sf_ref_rows_q8_0, dot_q8_0, sf_act_32, SF_QK32)
REF_ROWS(sf_ref_rows_q5_0, dot_q5_0, sf_act_32, SF_QK32)
REF_ROWS(sf_ref_rows_q4_0, dot_q4_0, sf_act_32, SF_QK32)
REF_ROWS(sf_ref_rows_q4_K, dot_q4_K, sf_act_k, SF_QKK)
REF_ROWS(sf_ref_rows_q6_K, dot_q6_K, sf_act_k, SF_QKK)

/* The x8 forms: every block back to its plain form, then the plain reference's own steps,
 * so the x8 kernels are held to exactly the plain rows' results. */
#define REF_ROWS_X8(NAME, GROUP, PLAIN, UNPACK, TERM, ACT, QK)                              \
    static void NAME(const uint8_t *w, size_t wrb, int64_t nrows, const uint8_t *xq,         \
                     size_t xrb, int64_t M, int64_t K, float *y, int64_t ldy) {              \
        const int64_t nb = K / (QK);                                                         \
        for (int64_t r = 0; r < nrows; r++) {                                                \
            const GROUP *group = (const GROUP *)(w + (r - r % 8) * wrb);                     \
            for (int64_t m = 0; m < M; m++) {                                                \
                const ACT *x = (const ACT *)(xq + m * xrb);                                  \
                float lanes[8] = {0};                                                        \
                for (int64_t i = 0; i < nb; i++) {                                           \
                    PLAIN b;                                                                 \
                    UNPACK(&group[i], (int)(r % 8), &b);                                     \
                    lanes[i % 8] += TERM(&b, &x[i]);                                         \
                }                                                                            \
                y[m * ldy + r] = sf_lanes8_sum(lanes);                                       \
            }                                                                                \
        }                                                                                    \
    }

REF_ROWS_X8(rows_q8_0_x8, sf_block_q8_0_x8, sf_block_q8_0, sf_unpack_q8_0_x8, q8_0_term, sf_act_32, SF_QK32)
REF_ROWS_X8(rows_q5_0_x8, sf_block_q5_0_x8, sf_block_q5_0, sf_unpack_q5_0_x8, q5_0_term, sf_act_32, SF_QK32)
REF_ROWS_X8(rows_q4_0_x8, sf_block_q4_0_x8, sf_block_q4_0, sf_unpack_q4_0_x8, q4_0_term, sf_act_32, SF_QK32)
REF_ROWS_X8(rows_q4_K_x8, sf_block_q4_K_x8, sf_block_q4_K, sf_unpack_q4_K_x8, q4_K_term, sf_act_k, SF_QKK)
REF_ROWS_X8(rows_q6_K_x8, sf_block_q6_K_x8, sf_block_q6_K, sf_unpack_q6_K_x8, q6_K_term, sf_act_k, SF_QKK)

/* ---- the wide products: tiles of 32 rows quantized again to int8 (blocks.h) ---- */

static void ref_wide_tile(int type, const uint8_t *w, size_t wrb, int64_t nb, sf_wide_block *tile) {
    const size_t bytes = type == SF_Q4_K_X8 ? sizeof(sf_block_q4_K_x8) : sizeof(sf_block_q6_K_x8);
    for (int n = 0; n < SF_WIDE_ROWS; n++)
        for (int64_t i = 0; i < nb; i++)
            sf_wide_row(type, w + (size_t)(n - n % 8) * wrb + (size_t)i * bytes, n % 8, ref_quant_block,
                        &tile[i], n);
}

static void ref_wide_rows(const sf_wide_block *tile, int64_t nb, const uint8_t *xq, size_t xrb, const int32_t *xsum,
                          int64_t M, float *y, int64_t ldy) {
    (void)xsum;  /* the reference sums the signed values itself */
    for (int64_t m = 0; m < M; m++) {
        const sf_act_k *x = (const sf_act_k *)(xq + (size_t)m * xrb);
        for (int n = 0; n < SF_WIDE_ROWS; n++) {
            float acc = 0.0f;
            for (int64_t i = 0; i < nb; i++) {
                int32_t s = 0;
                for (int u = 0; u < SF_QKK; u++) s += ((int)tile[i].q[u / 4][n][u % 4] - 128) * x[i].qs[u];
                acc = acc + (float)s * (x[i].d * tile[i].d[n]);
            }
            y[m * ldy + n] = acc;
        }
    }
}

/* ---- the wide products of Q4_0_X8 matrices: tiles of 32 rows' nibbles (blocks.h) ---- */

static void ref_wide32_tile(const uint8_t *w, size_t wrb, int64_t nb, sf_wide_block_32 *tile) {
    for (int n = 0; n < SF_WIDE_ROWS; n++)
        for (int64_t i = 0; i < nb; i++)
            sf_wide32_row((const sf_block_q4_0_x8 *)(w + (size_t)(n - n % 8) * wrb) + i, n % 8, &tile[i], n);
}

/* The repacked kernels' numbers (rows_q4_0_x8): the same exact integer per block (the -8
 * taken through xoff), the same sf_q32_term, lanes and sf_lanes8_sum. */
static void ref_wide32_rows(const sf_wide_block_32 *tile, int64_t nb, const uint8_t *xq, size_t xrb,
                            const int32_t *xoff, int64_t M, float *y, int64_t ldy) {
    for (int64_t m = 0; m < M; m++) {
        const sf_act_32 *x = (const sf_act_32 *)(xq + (size_t)m * xrb);
        for (int n = 0; n < SF_WIDE_ROWS; n++) {
            float lanes[8] = {0};
            for (int64_t i = 0; i < nb; i++) {
                int32_t s = xoff[m * nb + i];
                for (int v = 0; v < SF_QK32; v++) s += tile[i].q[v / 4][n][v % 4] * x[i].qs[v];
                lanes[i % 8] += (tile[i].d[n] * x[i].d) * (float)s;
            }
            y[m * ldy + n] = sf_lanes8_sum(lanes);
        }
    }
}

const struct sf_kernels sf_kernels_scalar = {
    .name = "scalar",
    .quant_k = ref_quant_k,
    .quant_32 = ref_quant_32,
    .q8_0 = sf_ref_rows_q8_0,
    .q5_0 = sf_ref_rows_q5_0,
    .q4_0 = sf_ref_rows_q4_0,
    .q4_K = sf_ref_rows_q4_K,
    .q6_K = sf_ref_rows_q6_K,
    .q8_0_x8 = rows_q8_0_x8,
    .q5_0_x8 = rows_q5_0_x8,
    .q4_0_x8 = rows_q4_0_x8,
    .q4_K_x8 = rows_q4_K_x8,
    .q6_K_x8 = rows_q6_K_x8,
    SF_LAYER_OPS,
    .wide_tile = ref_wide_tile,
    .wide_rows = ref_wide_rows,
    .wide32_tile = ref_wide32_tile,
    .wide32_rows = ref_wide32_rows,
};

/* ---- dequantization, in gguf.quants' order of float operations ---- */

/* w = d * q for the 32-value types (one rounding, so the order of the product is free) */
#define REF_DEQUANT32(BLOCK, VALUE)                                                         \
    for (int64_t i = 0; i < K / SF_QK32; i++, out += SF_QK32) {                             \
        const BLOCK *b = (const BLOCK *)(w + i * sizeof *b);                                \
        const float d = sf_fp16_to_fp32(sf_u16(&b->d));                                     \
        for (int v = 0; v < 32; v++) out[v] = d * (float)VALUE(b, v);                       \
    }

void sf_ref_dequantize_row(int type, const uint8_t *w, int64_t K, float *out) {
    switch (type) {
    case SF_Q8_0:
        REF_DEQUANT32(sf_block_q8_0, q8_0_value);
        break;
    case SF_Q5_0:
        REF_DEQUANT32(sf_block_q5_0, q5_0_value);
        break;
    case SF_Q4_0:
        REF_DEQUANT32(sf_block_q4_0, q4_0_value);
        break;
    case SF_Q4_K:
        for (int64_t i = 0; i < K / SF_QKK; i++, out += SF_QKK) {
            const sf_block_q4_K *b = (const sf_block_q4_K *)(w + i * sizeof *b);
            const float d = sf_fp16_to_fp32(sf_u16(&b->d)), dmin = sf_fp16_to_fp32(sf_u16(&b->dmin));
            uint8_t sc[8], mn[8];
            sf_q4k_scales(b->scales, sc, mn);
            for (int j = 0; j < 8; j++) {
                const float ds = d * (float)sc[j], dm = dmin * (float)mn[j];
                for (int l = 0; l < 32; l++) out[32 * j + l] = ds * (float)q4_K_value(b, 32 * j + l) - dm;
            }
        }
        break;
    case SF_Q6_K:
        for (int64_t i = 0; i < K / SF_QKK; i++, out += SF_QKK) {
            const sf_block_q6_K *b = (const sf_block_q6_K *)(w + i * sizeof *b);
            const float d = sf_fp16_to_fp32(sf_u16(&b->d));
            for (int g = 0; g < 16; g++) {
                const float ds = d * (float)b->scales[g];
                for (int l = 0; l < 16; l++) out[16 * g + l] = ds * (float)(q6_K_value(b, 16 * g + l) - 32);
            }
        }
        break;
    default:
        break;
    }
}

/* ---- quantization to Q4_0, as ggml's reference and gguf.quants round it ---- */

/* fp32 -> fp16, rounding to nearest even (subnormals, overflow to inf; as numpy's astype) */
static uint16_t fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u : 0));
    const int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {  /* an fp16 subnormal (or zero): m * 2^-24 */
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        const int shift = 14 - e;
        uint32_t half = mant >> shift;
        const uint32_t rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)e << 10) | (mant >> 13);
    const uint32_t rest = mant & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;  /* a carry rounds into the exponent */
    return (uint16_t)half;
}

/* One row of K values -> K / 32 Q4_0 blocks: the value of largest magnitude (the first of
 * equals) maps to -8, d = it / -8, q = min(15, trunc(x / d + 8.5)). */
void sf_ref_quantize_row_q4_0(const float *x, int64_t K, sf_block_q4_0 *out) {
    for (int64_t i = 0; i < K / SF_QK32; i++, x += SF_QK32) {
        float amax = fabsf(x[0]), top = x[0];
        for (int v = 1; v < 32; v++)
            if (fabsf(x[v]) > amax) {
                amax = fabsf(x[v]);
                top = x[v];
            }
        const float d = top / -8.0f, inverse = d != 0.0f ? 1.0f / d : 0.0f;
        const uint16_t h = fp32_to_fp16(d);
        memcpy(&out[i].d, &h, sizeof h);
        for (int j = 0; j < 16; j++) {
            const float lo = x[j] * inverse + 8.5f, hi = x[16 + j] * inverse + 8.5f;
            const int a = (int)lo, b = (int)hi;  /* both >= 0: trunc */
            out[i].qs[j] = (uint8_t)((a > 15 ? 15 : a) | (b > 15 ? 15 : b) << 4);
        }
    }
}
