/* Block layouts (GGUF / ggml, byte for byte) and the few scalar steps that every variant
 * shares, so that the float work is literally the same code in the reference and in each
 * ISA file. Include this header first in every .c file of the library: it switches off
 * floating-point contraction for the whole translation unit, whatever the flags say
 * (GCC contracts even _mm256_add_ps(_mm256_mul_ps(..)) into an FMA under fp-contract=fast,
 * which would make a variant differ from the reference in the last bit). */
#ifndef SF_BLOCKS_H
#define SF_BLOCKS_H

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "specfill_kernels.h"  /* the type ids */

#define SF_QK32 32   /* values per Q8_0 / Q5_0 / Q4_0 block */
#define SF_QKK 256   /* values per K-quant super-block */
#define SF_LANES 16  /* partial sums of the float steps' reductions (layer_body.h) */

/* ---- weight blocks, as stored in a GGUF file. Multi-byte fields are read with memcpy
 * (sf_u16): a row of 34-byte blocks leaves most blocks at odd addresses. ---- */

typedef struct {
    uint16_t d;          /* fp16 */
    int8_t qs[32];       /* w = d * q */
} sf_block_q8_0;

typedef struct {
    uint16_t d;          /* fp16 */
    uint8_t qs[16];      /* low nibble = value i, high nibble = value i + 16 */
} sf_block_q4_0;         /* w = d * (q - 8) */

typedef struct {
    uint16_t d;          /* fp16 */
    uint8_t qh[4];       /* bit i (little-endian uint32) = 5th bit of value i */
    uint8_t qs[16];      /* low nibble = value i, high nibble = value i + 16 */
} sf_block_q5_0;         /* w = d * ((q | h << 4) - 16) */

typedef struct {
    uint16_t d;          /* fp16, scale of the 6-bit sub-block scales */
    uint16_t dmin;       /* fp16, scale of the 6-bit sub-block mins */
    uint8_t scales[12];  /* 8 scales + 8 mins, 6 bits each (sf_q4k_scales) */
    uint8_t qs[128];     /* bytes 32g..32g+31: low nibbles = sub-block 2g, high = 2g+1 */
} sf_block_q4_K;         /* w = d*sc_j*q - dmin*m_j, sub-block j = 32 values */

typedef struct {
    uint8_t ql[128];     /* low 4 bits: half h, value r: ql[64h + r%64], nibble r/64 */
    uint8_t qh[64];      /* high 2 bits: qh[32h + r%32], bits 2*(r/32) */
    int8_t scales[16];   /* one per 16 values */
    uint16_t d;          /* fp16 */
} sf_block_q6_K;         /* w = d * scale_i * (q - 32) */

/* Q4_K repacked at load (sf_repack), losslessly and in the same bytes: super-block i of 8
 * weight rows side by side, so that one 32-byte load holds 4 values of each of the 8 rows
 * and a kernel keeps one vector lane per weight row. The sub-block scale then multiplies
 * once per 32 values and 8 rows, not once per 32 values and row. */
typedef struct {
    uint16_t d[8], dmin[8];  /* row n's d and dmin */
    uint32_t sc[3][8];       /* sc[w][n] = bytes 4w..4w+3 of row n's 12 scale bytes */
    uint8_t qs[32][32];      /* qs[8g + q][4n + b] = row n's qs[32g + 4q + b] */
} sf_block_q4_K_x8;

/* Q6_K repacked the same way. Value u = 4 * quad + b of a row; its low 4 bits and high 2
 * bits are split into planes so that each 32-byte load yields 4 quads of 8 rows, stored in
 * the order the kernels read them (a block read out of order streamed at a third of the
 * speed: the prefetchers lost track). */
typedef struct {
    uint16_t d[8];
    int8_t scales[16][8];   /* [g][n] = row n's scale of values 16g..16g+15 */
    uint8_t q[16][3][32];   /* [v][t][4n + b]; t = 0, 1: plane v + 16t of low 4 bits (low nibble:
                               quad v + 16t, value b; high nibble: quad v + 16t + 32);
                               t = 2: bits 2s, 2s+1 = high 2 bits of quad v + 16s, value b */
} sf_block_q6_K_x8;

/* Q8_0 and Q5_0 repacked the same way: block i of 8 rows side by side. */
typedef struct {
    uint16_t d[8];
    int8_t qs[8][32];     /* [q][4n + b] = row n's value 4q + b */
} sf_block_q8_0_x8;

typedef struct {
    uint16_t d[8];
    uint32_t qh[8];       /* row n's qh */
    uint8_t qs[4][32];    /* [q][4n + b] = row n's qs[4q + b]: low nibble = value 4q + b,
                             high nibble = value 16 + 4q + b */
} sf_block_q5_0_x8;

typedef struct {
    uint16_t d[8];
    uint8_t qs[4][32];    /* as Q5_0's x8 qs: [q][4n + b] = row n's qs[4q + b] */
} sf_block_q4_0_x8;

_Static_assert(sizeof(sf_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(sf_block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(sf_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(sf_block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(sf_block_q6_K) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(sf_block_q4_K_x8) == 8 * sizeof(sf_block_q4_K), "a Q4_K x8 block is 8 Q4_K blocks");
_Static_assert(sizeof(sf_block_q6_K_x8) == 8 * sizeof(sf_block_q6_K), "a Q6_K x8 block is 8 Q6_K blocks");
_Static_assert(sizeof(sf_block_q8_0_x8) == 8 * sizeof(sf_block_q8_0), "a Q8_0 x8 block is 8 Q8_0 blocks");
_Static_assert(sizeof(sf_block_q5_0_x8) == 8 * sizeof(sf_block_q5_0), "a Q5_0 x8 block is 8 Q5_0 blocks");
_Static_assert(sizeof(sf_block_q4_0_x8) == 8 * sizeof(sf_block_q4_0), "a Q4_0 x8 block is 8 Q4_0 blocks");

/* ---- activation blocks, made by the library from fp32 rows (sf_quantize_acts).
 * d = amax / 127, q = (int8) nearbyintf(x * (1/d)); see ref.c for the edge cases. ---- */

typedef struct {
    int8_t qs[256];      /* first, so that it is 32-byte aligned in an aligned row */
    int16_t bsums[16];   /* sum of each run of 16 qs */
    float d;
    uint8_t pad[28];     /* 320 bytes = 5 cache lines */
} sf_act_k;              /* for Q4_K / Q6_K weights */

typedef struct {
    float d;
    int8_t qs[32];
} sf_act_32;             /* for Q8_0 / Q5_0 / Q4_0 weights */

_Static_assert(sizeof(sf_act_k) == 320, "K activation block is 320 bytes");
_Static_assert(sizeof(sf_act_32) == 36, "32 activation block is 36 bytes");

/* Activation blocks whose amax is below this are all zero (d = 0): 1/d must stay finite. */
#define SF_ACT_TINY 1e-30f

/* The scale of an activation block of n values from its amax, with the reference's edge
 * cases (ref.c ref_quant_block): a NaN or an infinity in the block (`bad`, or amax
 * infinite) gives d = NaN, a tiny block d = 0, both with q = 0, and returns 0 (nothing left
 * to do); otherwise d = amax / 127, *id = 1 / d, and returns 1 (the caller rounds x * id). */
static inline int sf_act_scale(float amax, int bad, int n, int8_t *q, float *d, float *id) {
    if (bad || amax == __builtin_inff() || amax < SF_ACT_TINY) {
        memset(q, 0, (size_t)n);
        *d = amax < SF_ACT_TINY && !bad ? 0.0f : __builtin_nanf("");
        return 0;
    }
    *d = amax / 127.0f;
    *id = 1.0f / *d;
    return 1;
}

/* A variant's two activation quantizers around its block quantizer BLOCK(x, n, q) -> d:
 * K/256 sf_act_k blocks (with the sums of each run of 16 values) or K/32 sf_act_32 blocks. */
#define SF_QUANT_ROWS(QUANT_K, QUANT_32, BLOCK)                                                 \
    static void QUANT_K(const float *x, int64_t K, void *out) {                                 \
        sf_act_k *b = out;                                                                      \
        for (int64_t i = 0; i < K / SF_QKK; i++, x += SF_QKK) {                                 \
            memset(&b[i], 0, sizeof b[i]);                                                      \
            b[i].d = BLOCK(x, SF_QKK, b[i].qs);                                                 \
            for (int j = 0; j < 16; j++) {                                                      \
                int s = 0;                                                                      \
                for (int l = 0; l < 16; l++) s += b[i].qs[16 * j + l];                          \
                b[i].bsums[j] = (int16_t)s;                                                     \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
    static void QUANT_32(const float *x, int64_t K, void *out) {                                \
        sf_act_32 *b = out;                                                                     \
        for (int64_t i = 0; i < K / SF_QK32; i++, x += SF_QK32) b[i].d = BLOCK(x, SF_QK32, b[i].qs); \
    }

/* ---- shared scalar steps ---- */

static inline uint16_t sf_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline float sf_bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t sf_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* IEEE half -> float, exact for every finite value and infinities; a NaN comes back quiet
 * (as the F16C instruction does). Portable: the reference must not depend on the ISA. */
static inline float sf_fp16_to_fp32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0x1f)
        return sf_bits_f32(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0));
    if (exp != 0)
        return sf_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24, exact in float */
    return sf_bits_f32(sign | sf_f32_bits((float)man * 0x1p-24f));
}

/* The 6-bit scales and mins of a Q4_K super-block (layout as in gguf/quants.py Q4_K). */
static inline void sf_q4k_scales(const uint8_t s[12], uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
        mn[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Float work of one K-quant super-block; super-block i adds it to lane i % 8 of the row's
 * eight accumulators, which sf_lanes8_sum then folds.
 * d, dmin: the block's fp16 scales as floats (sf_fp16_to_fp32 or any exact conversion).
 * sumi = sum_j sc_j * <q_j, x_j>, summ = sum_j m_j * (bsum of sub-block j), both exact. */
static inline float sf_q4k_term(float d, float dmin, float xd, int32_t sumi, int32_t summ) {
    const float dall = d * xd;
    const float dmn = dmin * xd;
    return dall * (float)sumi - dmn * (float)summ;
}

/* sumi = sum_i scale_i * <q_i - 32, x_i>, exact. */
static inline float sf_q6k_term(float d, float xd, int32_t sumi) {
    return (d * xd) * (float)sumi;
}

/* Float work of one 32-value block: lane (i % 8) of 8 accumulators adds it. */
static inline float sf_q32_term(uint16_t d, float xd, int32_t sumi) {
    return (sf_fp16_to_fp32(d) * xd) * (float)sumi;
}

/* The fixed reduction of the 8 lanes (the AVX2 code gets it from a 256 -> 128 -> 64 -> 32
 * fold: lanes i and i+4, then i and i+2, then 0 and 1). */
static inline float sf_lanes8_sum(const float a[8]) {
    const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
    const float t0 = s0 + s2, t1 = s1 + s3;
    return t0 + t1;
}

/* Bytes of quantized activations per row (K a multiple of the activation block). */
static inline size_t sf_act_bytes_k(int64_t K) { return (size_t)(K / SF_QKK) * sizeof(sf_act_k); }
static inline size_t sf_act_bytes_32(int64_t K) { return (size_t)(K / SF_QK32) * sizeof(sf_act_32); }

/* ---- the wide products (sf_set_wide_rows): a prefill's many rows share weight tiles ----
 * A tile holds SF_WIDE_ROWS weight rows of one matrix, each K-quant super-block of each row
 * dequantized (sf_dequantize_rows' values) and quantized again to int8 exactly as an
 * activation block is (d = amax / 127, q = nearbyintf(v / d)), stored as q + 128 so that
 * the unsigned operand of u8 x s8 dot products is the weight: one zmm then holds 4 values of
 * 16 rows, and each activation row meets it with a 4-byte broadcast. Against the repacked
 * kernels no per-sub-block scale is applied per activation row: the scale work per row is
 * one float step a super-block and 16 weight rows. */
#define SF_WIDE_ROWS 32

typedef struct {
    float d[SF_WIDE_ROWS];                /* row n's scale of this super-block */
    uint8_t q[SF_QKK / 4][SF_WIDE_ROWS][4];  /* [quad j][row n][b] = row n's value 4j + b, + 128 */
} sf_wide_block;

_Static_assert(sizeof(sf_wide_block) == 128 + 8192, "a wide block is 32 scales and 32 x 256 bytes");

/* The wide products of Q4_0_X8 matrices (the draft model's layers, requantized at load):
 * Q4_0's nibbles are already small exact integers and its blocks are 32 values (K = 896
 * is not a multiple of 256), so nothing is rounded again: a tile holds SF_WIDE_ROWS rows'
 * unsigned nibbles (0..15) of one block as bytes, 16 rows to a zmm, each activation row
 * meeting them with a 4-byte broadcast, and the -8 comes off through the activation block's
 * sum. Each block's float step is the repacked kernels' own (sf_q32_term, lane i % 8), so
 * the wide products equal sf_matmul's repacked ones bit for bit: no tolerance, and no
 * constraint on which calls may take them. */
typedef struct {
    float d[SF_WIDE_ROWS];                    /* row n's fp16 d as a float (sf_fp16_to_fp32) */
    uint8_t q[SF_QK32 / 4][SF_WIDE_ROWS][4];  /* [quad j][row n][b] = row n's nibble 4j + b */
} sf_wide_block_32;

_Static_assert(sizeof(sf_wide_block_32) == 128 + 1024, "a Q4_0 wide block is 32 scales and 32 x 32 bytes");

/* ---- what one variant (one ISA file) provides; variants.c holds the table ----
 * quant_*: one fp32 row of K values -> K/256 sf_act_k (or K/32 sf_act_32) blocks.
 * rows: y[m * ldy + r] = dot(weight row r, activation row m) for r < nrows, m < M, with
 *   weight row r at w + r * w_row_bytes and activation row m at xq + m * xq_row_bytes.
 *   A variant may order the loops as it likes, but every y[m, n] must come out of the
 *   reference's sequence of float operations (the sf_*_term steps above, added to lane
 *   i % 8 in k order, then sf_lanes8_sum),
 *   so that the value never depends on M, on nrows or on the thread split. */
typedef void (*sf_quant_fn)(const float *x, int64_t K, void *out);
typedef void (*sf_rows_fn)(const uint8_t *w, size_t w_row_bytes, int64_t nrows,
                           const uint8_t *xq, size_t xq_row_bytes, int64_t M, int64_t K,
                           float *y, int64_t ldy);

struct sf_kernels {
    const char *name;
    sf_quant_fn quant_k, quant_32;
    sf_rows_fn q8_0, q5_0, q4_0, q4_K, q6_K;
    sf_rows_fn q8_0_x8, q5_0_x8, q4_0_x8, q4_K_x8, q6_K_x8;  /* nrows a multiple of 8, w as sf_repack_*_x8 leaves it */
    /* the float steps around the products (layer_body.h) */
    void (*rmsnorm)(const float *x, const float *w, int64_t M, int64_t K, float eps, float *out);
    void (*silu_mul)(const float *gate_up, int64_t M, int64_t F, float *out);
    void (*rope)(float *x, int64_t heads, int64_t D, const float *cos, const float *sin);
    void (*attend)(const float *const *q, const int64_t *L, int64_t n, const float *keys, const float *values,
                   int64_t D, float scale, float *s, int64_t span, float *const *out);
    /* the dot-product unit's own rate (sf_dot_peak): `iters` rounds of the named form's
     * multiply-adds on registers, returning how many int8 multiply-adds they were (0: no such
     * form); NULL for the reference */
    int64_t (*dot_loop)(int form, int64_t iters);
    const char *dot_forms[2];
    /* The wide products (NULL where the variant has none: sf_matmul then keeps the repacked
     * kernels). wide_tile: SF_WIDE_ROWS rows of a Q4_K_X8 or Q6_K_X8 matrix (x8 groups at
     * w, w + 8 * wrb, ...) -> nb tile blocks. wide_rows: y[m * ldy + n] for the tile's rows n
     * and M activation rows (xq, xrb apart), each y the sum over super-blocks b, in order from
     * +0.0, of (float)isum * (x.d * tile.d[n]), isum the exact integer dot of the int8 values;
     * xsum[m * nb + b] = the sum of activation block b's 256 values. */
    void (*wide_tile)(int type, const uint8_t *w, size_t wrb, int64_t nb, sf_wide_block *tile);
    void (*wide_rows)(const sf_wide_block *tile, int64_t nb, const uint8_t *xq, size_t xrb, const int32_t *xsum,
                      int64_t M, float *y, int64_t ldy);
    /* The same for Q4_0_X8 (sf_wide_block_32; NULL where the variant has none). wide32_tile:
     * SF_WIDE_ROWS rows (x8 groups at w, w + 8 * wrb, ...) of nb blocks -> nb tile blocks.
     * wide32_rows: y[m * ldy + n] for the tile's rows n and M activation rows of sf_act_32
     * blocks, each as the repacked kernels give it: block b's term (d_n * x.d) * (float)isum,
     * isum = <nibbles, x.qs> + xoff[m * nb + b] exactly (xoff = -8 * the block's sum of
     * x.qs), added to lane b % 8 of 8 float lanes from +0.0 in b order, then sf_lanes8_sum. */
    void (*wide32_tile)(const uint8_t *w, size_t wrb, int64_t nb, sf_wide_block_32 *tile);
    void (*wide32_rows)(const sf_wide_block_32 *tile, int64_t nb, const uint8_t *xq, size_t xrb, const int32_t *xoff,
                        int64_t M, float *y, int64_t ldy);
};

extern const struct sf_kernels sf_kernels_scalar;   /* ref.c */
#if defined(__x86_64__)
extern const struct sf_kernels sf_kernels_avx2;     /* avx2.c */
extern const struct sf_kernels sf_kernels_avx512;   /* avx512.c */
#endif
#if defined(__aarch64__)
extern const struct sf_kernels sf_kernels_neon;     /* neon.c */
#endif
/* The reference's plain-layout products (ref.c), for variants that vectorise only the
 * repacked layouts. */
void sf_ref_rows_q8_0(const uint8_t *, size_t, int64_t, const uint8_t *, size_t, int64_t, int64_t, float *, int64_t);
void sf_ref_rows_q5_0(const uint8_t *, size_t, int64_t, const uint8_t *, size_t, int64_t, int64_t, float *, int64_t);
void sf_ref_rows_q4_0(const uint8_t *, size_t, int64_t, const uint8_t *, size_t, int64_t, int64_t, float *, int64_t);
void sf_ref_rows_q4_K(const uint8_t *, size_t, int64_t, const uint8_t *, size_t, int64_t, int64_t, float *, int64_t);
void sf_ref_rows_q6_K(const uint8_t *, size_t, int64_t, const uint8_t *, size_t, int64_t, int64_t, float *, int64_t);

/* 8 Q4_K rows of nb super-blocks (row n at src + n * nb blocks) -> one x8 group. */
static inline void sf_repack_q4_K_x8(const sf_block_q4_K *src, int64_t nb, sf_block_q4_K_x8 *dst) {
    for (int64_t i = 0; i < nb; i++)
        for (int n = 0; n < 8; n++) {
            const sf_block_q4_K *b = &src[n * nb + i];
            memcpy(&dst[i].d[n], &b->d, 2);
            memcpy(&dst[i].dmin[n], &b->dmin, 2);
            for (int w = 0; w < 3; w++) memcpy(&dst[i].sc[w][n], b->scales + 4 * w, 4);
            for (int v = 0; v < 32; v++) memcpy(&dst[i].qs[v][4 * n], b->qs + 4 * v, 4);
        }
}

/* Row n of one x8 super-block back to a plain Q4_K block. */
static inline void sf_unpack_q4_K_x8(const sf_block_q4_K_x8 *src, int n, sf_block_q4_K *b) {
    memcpy(&b->d, &src->d[n], 2);
    memcpy(&b->dmin, &src->dmin[n], 2);
    for (int w = 0; w < 3; w++) memcpy(b->scales + 4 * w, &src->sc[w][n], 4);
    for (int v = 0; v < 32; v++) memcpy(b->qs + 4 * v, &src->qs[v][4 * n], 4);
}

/* Q6_K value u (0..255) of a block: low 4 bits and high 2 bits (before the -32). */
static inline int sf_q6k_low(const sf_block_q6_K *b, int u) {
    const int h = u / 128, r = u % 128;
    const uint8_t lo = b->ql[64 * h + r % 64];
    return (r / 64) ? (lo >> 4) : (lo & 0x0f);
}
static inline int sf_q6k_high(const sf_block_q6_K *b, int u) {
    const int h = u / 128, r = u % 128;
    return (b->qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
}

static inline void sf_repack_q6_K_x8(const sf_block_q6_K *src, int64_t nb, sf_block_q6_K_x8 *dst) {
    for (int64_t i = 0; i < nb; i++) {
        memset(&dst[i], 0, sizeof dst[i]);
        for (int n = 0; n < 8; n++) {
            const sf_block_q6_K *b = &src[n * nb + i];
            for (int quad = 0; quad < 64; quad++)
                for (int e = 0; e < 4; e++) {
                    const int u = 4 * quad + e, at = 4 * n + e;
                    dst[i].q[quad % 16][quad / 16 % 2][at] |= (uint8_t)(sf_q6k_low(b, u) << (4 * (quad / 32)));
                    dst[i].q[quad % 16][2][at] |= (uint8_t)(sf_q6k_high(b, u) << (2 * (quad / 16)));
                }
            for (int g = 0; g < 16; g++) dst[i].scales[g][n] = b->scales[g];
            memcpy(&dst[i].d[n], &b->d, 2);
        }
    }
}

/* Row n of one Q6_K x8 super-block back to a plain Q6_K block. */
static inline void sf_unpack_q6_K_x8(const sf_block_q6_K_x8 *src, int n, sf_block_q6_K *b) {
    memset(b, 0, sizeof *b);
    for (int quad = 0; quad < 64; quad++)
        for (int e = 0; e < 4; e++) {
            const int u = 4 * quad + e, at = 4 * n + e, h = u / 128, r = u % 128;
            const int lo = (src->q[quad % 16][quad / 16 % 2][at] >> (4 * (quad / 32))) & 0x0f;
            const int hi = (src->q[quad % 16][2][at] >> (2 * (quad / 16))) & 3;
            b->ql[64 * h + r % 64] |= (uint8_t)(lo << (4 * (r / 64)));
            b->qh[32 * h + r % 32] |= (uint8_t)(hi << (2 * (r / 32)));
        }
    for (int g = 0; g < 16; g++) b->scales[g] = src->scales[g][n];
    memcpy(&b->d, &src->d[n], 2);
}

static inline void sf_repack_q8_0_x8(const sf_block_q8_0 *src, int64_t nb, sf_block_q8_0_x8 *dst) {
    for (int64_t i = 0; i < nb; i++)
        for (int n = 0; n < 8; n++) {
            const sf_block_q8_0 *b = &src[n * nb + i];
            memcpy(&dst[i].d[n], &b->d, 2);
            for (int q = 0; q < 8; q++) memcpy(&dst[i].qs[q][4 * n], b->qs + 4 * q, 4);
        }
}

static inline void sf_unpack_q8_0_x8(const sf_block_q8_0_x8 *src, int n, sf_block_q8_0 *b) {
    memcpy(&b->d, &src->d[n], 2);
    for (int q = 0; q < 8; q++) memcpy(b->qs + 4 * q, &src->qs[q][4 * n], 4);
}

static inline void sf_repack_q5_0_x8(const sf_block_q5_0 *src, int64_t nb, sf_block_q5_0_x8 *dst) {
    for (int64_t i = 0; i < nb; i++)
        for (int n = 0; n < 8; n++) {
            const sf_block_q5_0 *b = &src[n * nb + i];
            memcpy(&dst[i].d[n], &b->d, 2);
            memcpy(&dst[i].qh[n], b->qh, 4);
            for (int q = 0; q < 4; q++) memcpy(&dst[i].qs[q][4 * n], b->qs + 4 * q, 4);
        }
}

static inline void sf_unpack_q5_0_x8(const sf_block_q5_0_x8 *src, int n, sf_block_q5_0 *b) {
    memcpy(&b->d, &src->d[n], 2);
    memcpy(b->qh, &src->qh[n], 4);
    for (int q = 0; q < 4; q++) memcpy(b->qs + 4 * q, &src->qs[q][4 * n], 4);
}

static inline void sf_repack_q4_0_x8(const sf_block_q4_0 *src, int64_t nb, sf_block_q4_0_x8 *dst) {
    for (int64_t i = 0; i < nb; i++)
        for (int n = 0; n < 8; n++) {
            const sf_block_q4_0 *b = &src[n * nb + i];
            memcpy(&dst[i].d[n], &b->d, 2);
            for (int q = 0; q < 4; q++) memcpy(&dst[i].qs[q][4 * n], b->qs + 4 * q, 4);
        }
}

static inline void sf_unpack_q4_0_x8(const sf_block_q4_0_x8 *src, int n, sf_block_q4_0 *b) {
    memcpy(&b->d, &src->d[n], 2);
    for (int q = 0; q < 4; q++) memcpy(b->qs + 4 * q, &src->qs[q][4 * n], 4);
}

/* The reference dequantizer (ref.c); the public sf_dequantize_rows checks and calls it. */
void sf_ref_dequantize_row(int type, const uint8_t *w, int64_t K, float *out);

/* Row n of one x8 super-block (type SF_Q4_K_X8 or SF_Q6_K_X8) into row `row` of a wide tile
 * block, as the reference defines it: dequantized by sf_ref_dequantize_row, quantized by
 * `quant` (a variant's activation block quantizer, each equal to ref.c's bit for bit), + 128.
 * The reference's tiles, and a vector variant's for super-blocks its fast path leaves. */
static inline void sf_wide_row(int type, const uint8_t *x8, int n, float (*quant)(const float *, int, int8_t *),
                               sf_wide_block *t, int row) {
    float v[SF_QKK];
    int8_t q[SF_QKK];
    if (type == SF_Q4_K_X8) {
        sf_block_q4_K b;
        sf_unpack_q4_K_x8((const sf_block_q4_K_x8 *)x8, n, &b);
        sf_ref_dequantize_row(SF_Q4_K, (const uint8_t *)&b, SF_QKK, v);
    } else {
        sf_block_q6_K b;
        sf_unpack_q6_K_x8((const sf_block_q6_K_x8 *)x8, n, &b);
        sf_ref_dequantize_row(SF_Q6_K, (const uint8_t *)&b, SF_QKK, v);
    }
    t->d[row] = quant(v, SF_QKK, q);
    for (int u = 0; u < SF_QKK; u++) t->q[u / 4][row][u % 4] = (uint8_t)(q[u] + 128);
}

/* Row n (0..7) of a Q4_0_X8 block into row `row` of a Q4_0 wide tile block, as the
 * reference defines it: value v < 16 is qs[v]'s low nibble, v >= 16 qs[v - 16]'s high one. */
static inline void sf_wide32_row(const sf_block_q4_0_x8 *g, int n, sf_wide_block_32 *t, int row) {
    sf_block_q4_0 b;
    sf_unpack_q4_0_x8(g, n, &b);
    t->d[row] = sf_fp16_to_fp32(sf_u16(&b.d));
    for (int v = 0; v < SF_QK32; v++)
        t->q[v / 4][row][v % 4] = (uint8_t)(v < 16 ? b.qs[v] & 0x0f : b.qs[v - 16] >> 4);
}

/* One fp32 row -> K / 32 Q4_0 blocks, ggml's reference rounding (ref.c; sf_requantize_rows). */
void sf_ref_quantize_row_q4_0(const float *x, int64_t K, sf_block_q4_0 *out);

#endif /* SF_BLOCKS_H */
