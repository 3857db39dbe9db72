/* ARM64 NEON with the dot-product extension (ARMv8.2 dotprod: Apple M1 and later, Graviton 2
 * and later, Cortex-A76 / X1 and later, Ampere Altra). variants.c runs it where the kernel
 * reports asimddp; elsewhere the scalar reference runs.
 *
 * Vectorised: the activation quantization, the repacked (x8) products the models run (every
 * matrix of the default models is repacked: their N are multiples of 8) and, through
 * layer_body.h, the float steps of a layer. The plain layouts (N not a multiple of 8) run
 * the reference's code.
 *
 * Bit-identical to ref.c, as the x86 files are: the integer work is exact in any order
 * (sdot multiplies signed bytes, so weights enter as their signed values and no sign trick
 * or bias correction is needed), and the float work of each block is sf_*_term's steps on
 * two 4-lane registers (lane n = weight row n), added to lane i % 8, folded by
 * sf_lanes8_sum. FCVT widens fp16 exactly, as sf_fp16_to_fp32 does. */
#include "blocks.h"

#if defined(__aarch64__)

#pragma GCC target("arch=armv8.2-a+dotprod")
#include <arm_neon.h>

#include "layer_body.h"
#include "rows_x8.h"

/* ---- activations: ref_quant_block, 4 floats at a time ---- */

static float quant_block(const float *x, int n, int8_t *q) {
    float32x4_t vmax = vdupq_n_f32(0.0f);
    uint32x4_t ordered = vdupq_n_u32(~0u);
    for (int i = 0; i < n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        ordered = vandq_u32(ordered, vceqq_f32(v, v));  /* false in a NaN's lane */
        vmax = vmaxq_f32(vmax, vabsq_f32(v));
    }
    const float amax = vmaxvq_f32(vmax);  /* a max is exact in any order */
    float d, id;
    if (!sf_act_scale(amax, vminvq_u32(ordered) == 0, n, q, &d, &id)) return d;
    for (int i = 0; i < n; i += 16) {
        /* FCVTNS rounds to nearest, ties to even: nearbyintf in the default mode */
        const int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + i), id));
        const int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 4), id));
        const int32x4_t c = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 8), id));
        const int32x4_t e = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + i + 12), id));
        const int16x8_t lo = vcombine_s16(vmovn_s32(a), vmovn_s32(b)), hi = vcombine_s16(vmovn_s32(c), vmovn_s32(e));
        vst1q_s8(q + i, vcombine_s8(vmovn_s16(lo), vmovn_s16(hi)));  /* |q| <= 127 */
    }
    return d;
}

SF_QUANT_ROWS(quant_k, quant_32, quant_block)

/* ---- the repacked kernels: 8 weight rows in two registers of 4 lanes ---- */

#define SF_NEON_RMAX 4  /* activation rows per pass over a group: 32 registers */
#define SF_ALWAYS_INLINE static inline __attribute__((always_inline))

typedef struct { int32x4_t v[2]; } i32x8;    /* lanes = weight rows 0-3, 4-7 */
typedef struct { float32x4_t v[2]; } f32x8;

static inline i32x8 i32x8_zero(void) { return (i32x8){{vdupq_n_s32(0), vdupq_n_s32(0)}}; }

/* lane n += <4 weights of row n, 4 activations> for the 16 bytes of rows 0-3 and 4-7 */
SF_ALWAYS_INLINE void dot4(i32x8 *acc, int8x16_t w03, int8x16_t w47, const int8_t *xq) {
    int32_t word;
    memcpy(&word, xq, sizeof word);
    const int8x16_t xb = vreinterpretq_s8_s32(vdupq_n_s32(word));
    acc->v[0] = vdotq_s32(acc->v[0], w03, xb);
    acc->v[1] = vdotq_s32(acc->v[1], w47, xb);
}

static inline f32x8 fp16x8(const uint16_t h[8]) {
    const uint16x8_t u = vld1q_u16(h);
    return (f32x8){{vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(u))),
                    vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(u)))}};
}

/* sf_q32_term / sf_q6k_term on 8 rows: acc += (d * xd) * (float) sumi */
SF_ALWAYS_INLINE void add_term(f32x8 *acc, f32x8 d, float xd, i32x8 sumi) {
    for (int h = 0; h < 2; h++)
        acc->v[h] = vaddq_f32(acc->v[h], vmulq_f32(vmulq_n_f32(d.v[h], xd), vcvtq_f32_s32(sumi.v[h])));
}

/* out[k][n] = sf_lanes8_sum over lanes b of acc[k][b][n]: the reference's fold, per row n */
SF_ALWAYS_INLINE void fold_lanes(f32x8 acc[][8], int R, float out[][8]) {
    for (int k = 0; k < R; k++) {
        float a[8][8];
        for (int b = 0; b < 8; b++) {
            vst1q_f32(a[b], acc[k][b].v[0]);
            vst1q_f32(a[b] + 4, acc[k][b].v[1]);
        }
        for (int n = 0; n < 8; n++) {
            const float lanes[8] = {a[0][n], a[1][n], a[2][n], a[3][n], a[4][n], a[5][n], a[6][n], a[7][n]};
            out[k][n] = sf_lanes8_sum(lanes);
        }
    }
}

SF_ALWAYS_INLINE void zero_acc(f32x8 acc[][8], int R) {
    for (int k = 0; k < R; k++)
        for (int b = 0; b < 8; b++) acc[k][b].v[0] = acc[k][b].v[1] = vdupq_n_f32(0.0f);
}

/* byte j of each 32-bit lane, as int32 */
static inline int32x4_t lane_byte(uint32x4_t u, int j) {
    return vreinterpretq_s32_u32(vandq_u32(vshlq_u32(u, vdupq_n_s32(-8 * j)), vdupq_n_u32(0xff)));
}

/* Q4_K: sub-block j of row n gets <q_j, x_j> in lane n (nibbles 0..15 as signed bytes, <=
 * 32*15*127), times its 6-bit scale; the mins term sum_j m_j * bsum_j per lane. */
SF_ALWAYS_INLINE void dot_q4_K_x8_rows(const sf_block_q4_K_x8 *blk, const sf_act_k *const *x, int R, int64_t nb,
                                       float out[][8]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    f32x8 acc[SF_NEON_RMAX][8];
    zero_acc(acc, R);
    for (int64_t i = 0; i < nb; i++) {
        const sf_block_q4_K_x8 *g = &blk[i];
        __builtin_prefetch((const char *)g + 1536);
        /* sf_q4k_scales on 8 rows at once: byte j of lane n = scale (or min) j of row n */
        uint32x4_t sc03[2], sc47[2], mn03[2], mn47[2];
        for (int h = 0; h < 2; h++) {
            const uint32x4_t u0 = vld1q_u32(g->sc[0] + 4 * h), u1 = vld1q_u32(g->sc[1] + 4 * h);
            const uint32x4_t u2 = vld1q_u32(g->sc[2] + 4 * h);
            const uint32x4_t m6 = vdupq_n_u32(0x3f3f3f3fu), lo4 = vdupq_n_u32(0x0f0f0f0fu), top2 = vdupq_n_u32(0x30303030u);
            sc03[h] = vandq_u32(u0, m6);
            mn03[h] = vandq_u32(u1, m6);
            sc47[h] = vorrq_u32(vandq_u32(u2, lo4), vandq_u32(vshrq_n_u32(u0, 2), top2));
            mn47[h] = vorrq_u32(vandq_u32(vshrq_n_u32(u2, 4), lo4), vandq_u32(vshrq_n_u32(u1, 2), top2));
        }
        i32x8 sumi[SF_NEON_RMAX], summ[SF_NEON_RMAX];
        for (int k = 0; k < R; k++) sumi[k] = summ[k] = i32x8_zero();
        for (int p = 0; p < 4; p++) {  /* sub-blocks 2p (low nibbles) and 2p + 1 (high) */
            i32x8 alo[SF_NEON_RMAX], ahi[SF_NEON_RMAX];
            for (int k = 0; k < R; k++) alo[k] = ahi[k] = i32x8_zero();
            for (int q = 0; q < 8; q++) {
                const uint8x16_t w03 = vld1q_u8(g->qs[8 * p + q]), w47 = vld1q_u8(g->qs[8 * p + q] + 16);
                const int8x16_t l03 = vreinterpretq_s8_u8(vandq_u8(w03, m4)), l47 = vreinterpretq_s8_u8(vandq_u8(w47, m4));
                const int8x16_t h03 = vreinterpretq_s8_u8(vshrq_n_u8(w03, 4)), h47 = vreinterpretq_s8_u8(vshrq_n_u8(w47, 4));
                for (int k = 0; k < R; k++) {
                    const int8_t *xq = x[k][i].qs + 64 * p + 4 * q;
                    dot4(&alo[k], l03, l47, xq);
                    dot4(&ahi[k], h03, h47, xq + 32);
                }
            }
            const int jl = (2 * p) % 4, jh = (2 * p + 1) % 4;  /* byte of sc03 / sc47 */
            for (int h = 0; h < 2; h++) {
                const uint32x4_t sc = p < 2 ? sc03[h] : sc47[h];
                const int32x4_t slo = lane_byte(sc, jl), shi = lane_byte(sc, jh);
                for (int k = 0; k < R; k++)
                    sumi[k].v[h] = vaddq_s32(sumi[k].v[h], vaddq_s32(vmulq_s32(alo[k].v[h], slo), vmulq_s32(ahi[k].v[h], shi)));
            }
        }
        for (int j = 0; j < 8; j++)
            for (int h = 0; h < 2; h++) {
                const int32x4_t m = lane_byte(j < 4 ? mn03[h] : mn47[h], j % 4);
                for (int k = 0; k < R; k++)
                    summ[k].v[h] = vmlaq_n_s32(summ[k].v[h], m, x[k][i].bsums[2 * j] + x[k][i].bsums[2 * j + 1]);
            }
        const f32x8 d = fp16x8(g->d), dmin = fp16x8(g->dmin);
        for (int k = 0; k < R; k++) {
            /* sf_q4k_term, 8 rows: (d * xd) * (float) sumi - (dmin * xd) * (float) summ */
            const float xd = x[k][i].d;
            for (int h = 0; h < 2; h++) {
                const float32x4_t t = vsubq_f32(vmulq_f32(vmulq_n_f32(d.v[h], xd), vcvtq_f32_s32(sumi[k].v[h])),
                                                vmulq_f32(vmulq_n_f32(dmin.v[h], xd), vcvtq_f32_s32(summ[k].v[h])));
                acc[k][i % 8].v[h] = vaddq_f32(acc[k][i % 8].v[h], t);
            }
        }
    }
    fold_lanes(acc, R, out);
}

/* Q6_K: quads v, v + 16, v + 32, v + 48 come out of two low-bit planes and one high-bit
 * plane (blocks.h); values q - 32 as signed bytes; sum_g s_g * <q_g - 32, x_g> per lane. */
SF_ALWAYS_INLINE void dot_q6_K_x8_rows(const sf_block_q6_K_x8 *blk, const sf_act_k *const *x, int R, int64_t nb,
                                       float out[][8]) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m2 = vdupq_n_u8(0x30);
    const int8x16_t bias = vdupq_n_s8(32);
    f32x8 acc[SF_NEON_RMAX][8];
    zero_acc(acc, R);
    for (int64_t i = 0; i < nb; i++) {
        const sf_block_q6_K_x8 *g = &blk[i];
        __builtin_prefetch((const char *)g + 1536);
        i32x8 sumi[SF_NEON_RMAX];
        for (int k = 0; k < R; k++) sumi[k] = i32x8_zero();
        for (int gp = 0; gp < 4; gp++) {  /* sub-blocks gp, gp + 4, gp + 8, gp + 12 */
            i32x8 a[4][SF_NEON_RMAX];
            for (int t = 0; t < 4; t++)
                for (int k = 0; k < R; k++) a[t][k] = i32x8_zero();
            for (int v = 4 * gp; v < 4 * gp + 4; v++) {
                int8x16_t q[4][2];  /* quads v + 16t, rows 0-3 and 4-7 */
                for (int h = 0; h < 2; h++) {
                    const uint8x16_t L0 = vld1q_u8(g->q[v][0] + 16 * h), L1 = vld1q_u8(g->q[v][1] + 16 * h);
                    const uint8x16_t H = vld1q_u8(g->q[v][2] + 16 * h);
                    const uint8x16_t u[4] = {
                        vorrq_u8(vandq_u8(L0, m4), vandq_u8(vshlq_n_u8(H, 4), m2)),
                        vorrq_u8(vandq_u8(L1, m4), vandq_u8(vshlq_n_u8(H, 2), m2)),
                        vorrq_u8(vshrq_n_u8(L0, 4), vandq_u8(H, m2)),
                        vorrq_u8(vshrq_n_u8(L1, 4), vandq_u8(vshrq_n_u8(H, 2), m2)),
                    };
                    for (int t = 0; t < 4; t++) q[t][h] = vsubq_s8(vreinterpretq_s8_u8(u[t]), bias);
                }
                for (int t = 0; t < 4; t++)
                    for (int k = 0; k < R; k++) dot4(&a[t][k], q[t][0], q[t][1], x[k][i].qs + 4 * (v + 16 * t));
            }
            for (int t = 0; t < 4; t++) {
                const int8x8_t s8 = vld1_s8(g->scales[gp + 4 * t]);
                const int16x8_t s16 = vmovl_s8(s8);
                const int32x4_t s[2] = {vmovl_s16(vget_low_s16(s16)), vmovl_s16(vget_high_s16(s16))};
                for (int k = 0; k < R; k++)
                    for (int h = 0; h < 2; h++) sumi[k].v[h] = vmlaq_s32(sumi[k].v[h], a[t][k].v[h], s[h]);
            }
        }
        const f32x8 d = fp16x8(g->d);
        for (int k = 0; k < R; k++) add_term(&acc[k][i % 8], d, x[k][i].d, sumi[k]);
    }
    fold_lanes(acc, R, out);
}

/* Q5_0's fifth bits of quad c (values 4c..4c+3) of rows 0-3 or 4-7 as 0x10 bytes: byte 4n + b
 * tests bit 4c + b of row n's qh. */
static inline uint8x16_t q5_0_high(uint8x16_t qh, int c) {
    const uint8_t k = (uint8_t)(c / 2), o = (uint8_t)(4 * (c % 2));
    const uint8_t pick[16] = {k, k, k, k, 4 + k, 4 + k, 4 + k, 4 + k, 8 + k, 8 + k, 8 + k, 8 + k, 12 + k, 12 + k, 12 + k, 12 + k};
    const uint8_t bits[16] = {1 << o, 2 << o, 4 << o, 8 << o, 1 << o, 2 << o, 4 << o, 8 << o,
                              1 << o, 2 << o, 4 << o, 8 << o, 1 << o, 2 << o, 4 << o, 8 << o};
    const uint8x16_t spread = vqtbl1q_u8(qh, vld1q_u8(pick));
    return vandq_u8(vtstq_u8(spread, vld1q_u8(bits)), vdupq_n_u8(0x10));
}

/* Q8_0, Q5_0 and Q4_0: one 32-value block per group step, the weights as signed bytes (Q5_0 / Q4_0:
 * q - 16 / q - 8), sf_q32_term per block. */
enum { SF_W_Q8_0, SF_W_Q5_0, SF_W_Q4_0 };

SF_ALWAYS_INLINE void dot_q32_x8_rows(const uint8_t *blk, const sf_act_32 *const *x, int R, int64_t nb,
                                      float out[][8], int kind) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    const int five = kind == SF_W_Q5_0;
    const int8x16_t bias = vdupq_n_s8(five ? 16 : 8);
    const size_t bsize = kind == SF_W_Q8_0 ? sizeof(sf_block_q8_0_x8)
                       : five ? sizeof(sf_block_q5_0_x8) : sizeof(sf_block_q4_0_x8);
    f32x8 acc[SF_NEON_RMAX][8];
    zero_acc(acc, R);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *g = blk + (size_t)i * bsize;
        __builtin_prefetch((const char *)g + 1536);
        i32x8 sumi[SF_NEON_RMAX];
        for (int k = 0; k < R; k++) sumi[k] = i32x8_zero();
        if (kind == SF_W_Q8_0) {
            const sf_block_q8_0_x8 *b8 = (const sf_block_q8_0_x8 *)g;
            for (int q = 0; q < 8; q++) {
                const int8x16_t w03 = vld1q_s8(b8->qs[q]), w47 = vld1q_s8(b8->qs[q] + 16);
                for (int k = 0; k < R; k++) dot4(&sumi[k], w03, w47, x[k][i].qs + 4 * q);
            }
        } else {  /* Q5_0 and Q4_0: the same nibbles; Q5_0 adds its fifth bits */
            const uint8_t(*qs)[32] = five ? ((const sf_block_q5_0_x8 *)g)->qs : ((const sf_block_q4_0_x8 *)g)->qs;
            const uint32_t *qh32 = ((const sf_block_q5_0_x8 *)g)->qh;
            const uint8x16_t qh[2] = {five ? vreinterpretq_u8_u32(vld1q_u32(qh32)) : vdupq_n_u8(0),
                                      five ? vreinterpretq_u8_u32(vld1q_u32(qh32 + 4)) : vdupq_n_u8(0)};
            for (int q = 0; q < 4; q++) {  /* quads q (low nibbles) and q + 4 (high) */
                int8x16_t lo[2], hi[2];
                for (int h = 0; h < 2; h++) {
                    const uint8x16_t P = vld1q_u8(qs[q] + 16 * h);
                    uint8x16_t l = vandq_u8(P, m4), u = vshrq_n_u8(P, 4);
                    if (five) {
                        l = vorrq_u8(l, q5_0_high(qh[h], q));
                        u = vorrq_u8(u, q5_0_high(qh[h], q + 4));
                    }
                    lo[h] = vsubq_s8(vreinterpretq_s8_u8(l), bias);
                    hi[h] = vsubq_s8(vreinterpretq_s8_u8(u), bias);
                }
                for (int k = 0; k < R; k++) {
                    dot4(&sumi[k], lo[0], lo[1], x[k][i].qs + 4 * q);
                    dot4(&sumi[k], hi[0], hi[1], x[k][i].qs + 16 + 4 * q);
                }
            }
        }
        uint16_t dh[8];
        memcpy(dh, g, sizeof dh);  /* d[8] leads both layouts */
        const f32x8 d = fp16x8(dh);
        for (int k = 0; k < R; k++) add_term(&acc[k][i % 8], d, x[k][i].d, sumi[k]);
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

SF_ALWAYS_INLINE void dot_q4_0_x8_rows(const sf_block_q4_0_x8 *blk, const sf_act_32 *const *x, int R, int64_t nb,
                                       float out[][8]) {
    dot_q32_x8_rows((const uint8_t *)blk, x, R, nb, out, SF_W_Q4_0);
}

/* R as a constant in each case, so the loops over R unroll into registers. */
#define SF_DOT_R4(DOT, group, x, R, nb, out)                                                   \
    switch (R) {                                                                               \
    case 1: DOT(group, x, 1, nb, out); break;                                                  \
    case 2: DOT(group, x, 2, nb, out); break;                                                  \
    case 3: DOT(group, x, 3, nb, out); break;                                                  \
    default: DOT(group, x, 4, nb, out); break;                                                 \
    }

#define ROWS_X8(NAME, DOT, GROUP, ACT, QK) SF_ROWS_X8(NAME, DOT, SF_DOT_R4, GROUP, ACT, QK, SF_NEON_RMAX)

ROWS_X8(rows_q4_K_x8, dot_q4_K_x8_rows, sf_block_q4_K_x8, sf_act_k, SF_QKK)
ROWS_X8(rows_q6_K_x8, dot_q6_K_x8_rows, sf_block_q6_K_x8, sf_act_k, SF_QKK)
ROWS_X8(rows_q8_0_x8, dot_q8_0_x8_rows, sf_block_q8_0_x8, sf_act_32, SF_QK32)
ROWS_X8(rows_q5_0_x8, dot_q5_0_x8_rows, sf_block_q5_0_x8, sf_act_32, SF_QK32)
ROWS_X8(rows_q4_0_x8, dot_q4_0_x8_rows, sf_block_q4_0_x8, sf_act_32, SF_QK32)

const struct sf_kernels sf_kernels_neon = {
    .name = "neon", .quant_k = quant_k, .quant_32 = quant_32,
    .q8_0 = sf_ref_rows_q8_0, .q5_0 = sf_ref_rows_q5_0, .q4_0 = sf_ref_rows_q4_0,
    .q4_K = sf_ref_rows_q4_K, .q6_K = sf_ref_rows_q6_K,
    .q8_0_x8 = rows_q8_0_x8, .q5_0_x8 = rows_q5_0_x8, .q4_0_x8 = rows_q4_0_x8, .q4_K_x8 = rows_q4_K_x8, .q6_K_x8 = rows_q6_K_x8,
    SF_LAYER_OPS,
};

#endif /* __aarch64__ */
