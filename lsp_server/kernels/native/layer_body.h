/* The float steps of a decoder layer around its matrix products, for the few rows of a
 * decode step or a verify: RMSNorm, rotary embedding, attention over the KV cache, SiLU.
 *
 * Portable C (GCC / clang), included by ref.c and by each ISA file after its target pragma:
 * the compiler vectorizes the same source for each ISA (the attention scores spell out their
 * vectors, with the vector extension). Every loop that carries a float sum keeps
 * SF_LANES separate partial sums, combined in one fixed order at the end, so a vectorized
 * build performs the scalar build's operations lane for lane (no contraction: blocks.h)
 * and gives its bits. A row's numbers never depend on the other rows or on the thread
 * that computes it: verifies stay exact.
 *
 * Why here and not in torch: in a native decode step of the 1.5B target these steps cost
 * more than a third of the step on torch's single thread (~40 small ops a layer). */
#ifndef SF_LAYER_BODY_H
#define SF_LAYER_BODY_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* No trapping math: the compiler may then vectorize the branch-free selects below (GCC 12
 * keeps them scalar otherwise). It changes no result; nothing reads the FP flags. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

/* Fixed-order sum of SF_LANES partial sums. */
static inline float lanes_sum(const float *a) {
    float s8[8], s4[4];
    for (int l = 0; l < 8; l++) s8[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; l++) s4[l] = s8[l] + s8[l + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

/* e^x, ~1 ulp, for x in [-87.3, 88] (clamped there): Cephes' single-precision polynomial,
 * rounding by the 1.5 * 2^23 trick and 2^n from the rounded sum's own bits, so that a loop
 * of it is branch-free and vectorizes (no libm call). */
static inline float sf_exp(float x) {
    x = x < 88.0f ? x : 88.0f;
    x = x > -87.3f ? x : -87.3f;
    const union { float f; int32_t i; } t = {.f = x * 1.44269504088896341f + 12582912.0f};
    const float n = t.f - 12582912.0f;  /* round(x / ln 2) */
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    const union { int32_t i; float f; } scale = {.i = (t.i - 0x4B400000 + 127) << 23};  /* 2^n */
    return p * scale.f;
}

/* out[m] = x[m] / sqrt(mean(x[m]^2) + eps) * w, K a multiple of SF_LANES. */
static void layer_rmsnorm(const float *x, const float *w, int64_t M, int64_t K, float eps, float *out) {
    for (int64_t m = 0; m < M; m++) {
        const float *xm = x + m * K;
        float acc[SF_LANES] = {0};
        for (int64_t k = 0; k < K; k += SF_LANES)
            for (int l = 0; l < SF_LANES; l++) acc[l] += xm[k + l] * xm[k + l];
        const float r = 1.0f / sqrtf(lanes_sum(acc) / (float)K + eps);
        float *om = out + m * K;
        for (int64_t k = 0; k < K; k++) om[k] = w[k] * (xm[k] * r);
    }
}

/* out[m] = silu(gate) * up for rows [gate (F) | up (F)]; silu(g) = g / (1 + e^-g). */
static void layer_silu_mul(const float *gate_up, int64_t M, int64_t F, float *out) {
    for (int64_t m = 0; m < M; m++) {
        const float *g = gate_up + m * 2 * F, *u = g + F;
        float *om = out + m * F;
        for (int64_t f = 0; f < F; f++) om[f] = g[f] / (1.0f + sf_exp(-g[f])) * u[f];
    }
}

/* In place on `heads` vectors of D values (rotate-half form, as Qwen2 and Llama apply it):
 * x[i] = x[i] cos[i] - x[i + D/2] sin[i], x[i + D/2] = x[i + D/2] cos[i + D/2] + x[i] sin[i + D/2]. */
static void layer_rope(float *x, int64_t heads, int64_t D, const float *cos, const float *sin) {
    const int64_t h = D / 2;
    for (int64_t j = 0; j < heads; j++) {
        float *v = x + j * D;
        float lo[256], hi[256];  /* D <= 512 (checked by the caller) */
        for (int64_t i = 0; i < h; i++) {
            lo[i] = v[i] * cos[i] - v[i + h] * sin[i];
            hi[i] = v[i + h] * cos[i + h] + v[i] * sin[i + h];
        }
        memcpy(v, lo, (size_t)h * sizeof(float));
        memcpy(v + h, hi, (size_t)h * sizeof(float));
    }
}

/* Values a block of the cache holds: 32 of D = 128 floats, 16 KB, stay in L1 while every
 * query of the call passes over them (the keys go 16 at a time: SF_ATTEND_KEYS). */
#define SF_ATTEND_BLOCK 32
/* Keys a query meets at once in attend_scores, turned once for all the call's queries: one
 * per lane of its score vectors. */
#define SF_ATTEND_KEYS 16

/* The scores run across keys, not along d: lane j of a vector is key j. GCC's vector extension
 * (clang has it too), 8 floats: a ymm on x86, two q registers on NEON, two xmm in ref.c; the
 * compiler keeps each operation lane for lane (no contraction: blocks.h). Plain loops over
 * arrays did not stay in registers (GCC 12 scalarised the sums and the transposition). */
typedef float sf_v8 __attribute__((vector_size(8 * sizeof(float))));
typedef float sf_v8u __attribute__((vector_size(8 * sizeof(float)), aligned(4)));  /* unaligned */
typedef float sf_v4 __attribute__((vector_size(4 * sizeof(float))));
typedef float sf_v4u __attribute__((vector_size(4 * sizeof(float)), aligned(4)));
typedef int32_t sf_v8i __attribute__((vector_size(8 * sizeof(int32_t))));
typedef int32_t sf_v4i __attribute__((vector_size(4 * sizeof(int32_t))));
#if defined(__clang__)
#define SF_SHUF8(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#define SF_SHUF4(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SF_SHUF8(a, b, ...) __builtin_shuffle(a, b, (sf_v8i){__VA_ARGS__})
#define SF_SHUF4(a, b, ...) __builtin_shuffle(a, b, (sf_v4i){__VA_ARGS__})
#endif

/* kt[d][j] = keys[t0 + j][d] for j in [0, t1 - t0), 0.0 for the rest of the SF_ATTEND_KEYS,
 * turned a tile at a time in registers: as scalar copies it cost more than the scores of
 * the 6 queries of a decode step. Moves only, no arithmetic. */
static inline void attend_transpose(const float *keys, int64_t t0, int64_t t1, int64_t D, sf_v8 *kt) {
#if defined(__AVX__)
    /* 8 x 8 tiles: AVX's unpack / shuffle / lane-permute pattern, on ymm */
    for (int h = 0; h < SF_ATTEND_KEYS / 8; h++)
        for (int64_t d = 0; d < D; d += 8) {
            sf_v8 r[8];
            for (int j = 0; j < 8; j++)
                r[j] = t0 + 8 * h + j < t1 ? *(const sf_v8u *)(keys + (t0 + 8 * h + j) * D + d) : (sf_v8){0};
            const sf_v8 a0 = SF_SHUF8(r[0], r[1], 0, 8, 1, 9, 4, 12, 5, 13), a1 = SF_SHUF8(r[0], r[1], 2, 10, 3, 11, 6, 14, 7, 15);
            const sf_v8 a2 = SF_SHUF8(r[2], r[3], 0, 8, 1, 9, 4, 12, 5, 13), a3 = SF_SHUF8(r[2], r[3], 2, 10, 3, 11, 6, 14, 7, 15);
            const sf_v8 a4 = SF_SHUF8(r[4], r[5], 0, 8, 1, 9, 4, 12, 5, 13), a5 = SF_SHUF8(r[4], r[5], 2, 10, 3, 11, 6, 14, 7, 15);
            const sf_v8 a6 = SF_SHUF8(r[6], r[7], 0, 8, 1, 9, 4, 12, 5, 13), a7 = SF_SHUF8(r[6], r[7], 2, 10, 3, 11, 6, 14, 7, 15);
            const sf_v8 b0 = SF_SHUF8(a0, a2, 0, 1, 8, 9, 4, 5, 12, 13), b1 = SF_SHUF8(a0, a2, 2, 3, 10, 11, 6, 7, 14, 15);
            const sf_v8 b2 = SF_SHUF8(a1, a3, 0, 1, 8, 9, 4, 5, 12, 13), b3 = SF_SHUF8(a1, a3, 2, 3, 10, 11, 6, 7, 14, 15);
            const sf_v8 b4 = SF_SHUF8(a4, a6, 0, 1, 8, 9, 4, 5, 12, 13), b5 = SF_SHUF8(a4, a6, 2, 3, 10, 11, 6, 7, 14, 15);
            const sf_v8 b6 = SF_SHUF8(a5, a7, 0, 1, 8, 9, 4, 5, 12, 13), b7 = SF_SHUF8(a5, a7, 2, 3, 10, 11, 6, 7, 14, 15);
            sf_v8 *o = kt + d * (SF_ATTEND_KEYS / 8) + h;  /* row d + i at o[i * 2] */
            o[0] = SF_SHUF8(b0, b4, 0, 1, 2, 3, 8, 9, 10, 11);
            o[2] = SF_SHUF8(b1, b5, 0, 1, 2, 3, 8, 9, 10, 11);
            o[4] = SF_SHUF8(b2, b6, 0, 1, 2, 3, 8, 9, 10, 11);
            o[6] = SF_SHUF8(b3, b7, 0, 1, 2, 3, 8, 9, 10, 11);
            o[8] = SF_SHUF8(b0, b4, 4, 5, 6, 7, 12, 13, 14, 15);
            o[10] = SF_SHUF8(b1, b5, 4, 5, 6, 7, 12, 13, 14, 15);
            o[12] = SF_SHUF8(b2, b6, 4, 5, 6, 7, 12, 13, 14, 15);
            o[14] = SF_SHUF8(b3, b7, 4, 5, 6, 7, 12, 13, 14, 15);
        }
#else
    /* 4 x 4 tiles on 16-byte registers (NEON's zip, SSE's unpack): GCC turns 8-float shuffles
     * there into element copies */
    for (int h = 0; h < SF_ATTEND_KEYS / 4; h++)
        for (int64_t d = 0; d < D; d += 4) {
            sf_v4 r[4];
            for (int j = 0; j < 4; j++)
                r[j] = t0 + 4 * h + j < t1 ? *(const sf_v4u *)(keys + (t0 + 4 * h + j) * D + d) : (sf_v4){0};
            const sf_v4 a0 = SF_SHUF4(r[0], r[1], 0, 4, 1, 5), a1 = SF_SHUF4(r[0], r[1], 2, 6, 3, 7);
            const sf_v4 a2 = SF_SHUF4(r[2], r[3], 0, 4, 1, 5), a3 = SF_SHUF4(r[2], r[3], 2, 6, 3, 7);
            sf_v4 *o = (sf_v4 *)kt + d * (SF_ATTEND_KEYS / 4) + h;  /* row d + i at o[i * 4] */
            o[0] = SF_SHUF4(a0, a2, 0, 1, 4, 5);
            o[4] = SF_SHUF4(a0, a2, 2, 3, 6, 7);
            o[8] = SF_SHUF4(a1, a3, 0, 1, 4, 5);
            o[12] = SF_SHUF4(a1, a3, 2, 3, 6, 7);
        }
#endif
}

/* s[j] = (q . key j) * scale for the SF_ATTEND_KEYS keys of kt (attend_transpose), with the
 * operations of one key at a time: SF_LANES partial sums over d in order, acc[l] += q[d + l] *
 * k[d + l] from +0.0, then lanes_sum's tree, then * scale. Here partial sum l of the 16 keys is
 * a vector over the keys (two sf_v8), so the tree is vector adds, where per key it was
 * shuffles and scalar adds. Lanes l, l + 4, l + 8, l + 12 are summed together: they meet first
 * in the tree (s8[l] = a[l] + a[l + 8], s4[l] = s8[l] + s8[l + 4]). Scores of 126 queries over
 * ~410 keys, D = 128, one thread of an AMD EPYC Zen 4, avx512: 357 -> 199 us (4 keys a query
 * at a time, each key's 16 sums reduced alone); of 6 queries (a decode step): 17 -> 12 us. */
static inline void attend_scores(const float *q, const sf_v8 *kt, int64_t D, float scale, float *s) {
    sf_v8 s4[4][2];
    for (int g = 0; g < 4; g++) {
        sf_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};  /* keys 0-7, 8-15 */
        for (int64_t d = g; d < D; d += SF_LANES) {
            const sf_v8 *k = kt + d * 2;  /* rows d, d + 4, d + 8, d + 12 of kt: lanes g, g + 4, .. */
            a0 += q[d] * k[0], b0 += q[d] * k[1];
            a1 += q[d + 4] * k[8], b1 += q[d + 4] * k[9];
            a2 += q[d + 8] * k[16], b2 += q[d + 8] * k[17];
            a3 += q[d + 12] * k[24], b3 += q[d + 12] * k[25];
        }
        s4[g][0] = (a0 + a2) + (a1 + a3);
        s4[g][1] = (b0 + b2) + (b1 + b3);
    }
    *(sf_v8u *)s = ((s4[0][0] + s4[2][0]) + (s4[1][0] + s4[3][0])) * scale;
    *(sf_v8u *)(s + 8) = ((s4[0][1] + s4[2][1]) + (s4[1][1] + s4[3][1])) * scale;
}

/* Slices of out summed side by side in attend_values: one slice alone was a chain of
 * dependent adds, one add latency a value (perf, a 1,000-token prefill in 256-row feeds on an
 * AMD EPYC Zen 4: a third of layer_attend's time on that loop's branch) */
#define SF_ATTEND_SLICES 4

/* out += sum over u in [u0, u1), in order, of p[u] * values[u]: slices of out stay in
 * registers across the values, each element summed in the same order as one at a time. */
static inline void attend_values(const float *p, const float *values, int64_t u0, int64_t u1, int64_t D,
                                 float *out) {
    int64_t d = 0;
    for (; d + SF_ATTEND_SLICES * SF_LANES <= D; d += SF_ATTEND_SLICES * SF_LANES) {
        float o[SF_ATTEND_SLICES][SF_LANES];
        for (int c = 0; c < SF_ATTEND_SLICES; c++)
            for (int l = 0; l < SF_LANES; l++) o[c][l] = out[d + c * SF_LANES + l];
        for (int64_t u = u0; u < u1; u++)
            for (int c = 0; c < SF_ATTEND_SLICES; c++)
                for (int l = 0; l < SF_LANES; l++) o[c][l] += p[u] * values[u * D + d + c * SF_LANES + l];
        for (int c = 0; c < SF_ATTEND_SLICES; c++)
            for (int l = 0; l < SF_LANES; l++) out[d + c * SF_LANES + l] = o[c][l];
    }
    for (; d < D; d += SF_LANES) {
        float o[SF_LANES];
        for (int l = 0; l < SF_LANES; l++) o[l] = out[d + l];
        for (int64_t u = u0; u < u1; u++)
            for (int l = 0; l < SF_LANES; l++) o[l] += p[u] * values[u * D + d + l];
        for (int l = 0; l < SF_LANES; l++) out[d + l] = o[l];
    }
}

/* n query vectors against keys / values [.., D] of one key-value head, query i over the
 * first L[i] positions: out[i] = softmax(q[i] k^T * scale) v. `s` holds n rows of `span`
 * floats of scratch (span >= every L[i]); D a multiple of SF_LANES.
 * Each query's numbers are those of it alone, operation for operation: every sum runs in
 * the order one query at a time would run it. The cache is read a block at a time for all
 * n queries (a verify of 8 target rows has 48 a key-value head) instead of once per query:
 * on an AMD EPYC, Zen 4, one query at a time was 10 % of an 8-row feed and 14 % of a
 * 1,000-token prefill in 16-row chunks (perf). */
static void layer_attend(const float *const *q, const int64_t *L, int64_t n, const float *keys,
                         const float *values, int64_t D, float scale, float *s, int64_t span,
                         float *const *out) {
    int64_t most = 0;
    for (int64_t i = 0; i < n; i++) most = L[i] > most ? L[i] : most;
    /* SF_ATTEND_KEYS keys turned once for all n queries; a query that ends inside them takes
     * the scores of its own (the other lanes are other keys, or 0.0 past the last key). */
    sf_v8 kt[512 * SF_ATTEND_KEYS / 8];  /* 32 KB: D <= 512 */
    float part[SF_ATTEND_KEYS];
    for (int64_t t0 = 0; t0 < most; t0 += SF_ATTEND_KEYS) {
        attend_transpose(keys, t0, t0 + SF_ATTEND_KEYS < most ? t0 + SF_ATTEND_KEYS : most, D, kt);
        for (int64_t i = 0; i < n; i++) {
            const int64_t t1 = t0 + SF_ATTEND_KEYS < L[i] ? t0 + SF_ATTEND_KEYS : L[i];
            if (t1 - t0 == SF_ATTEND_KEYS) attend_scores(q[i], kt, D, scale, s + i * span + t0);
            else if (t1 > t0) {
                attend_scores(q[i], kt, D, scale, part);
                for (int64_t t = t0; t < t1; t++) s[i * span + t] = part[t - t0];
            }
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float *si = s + i * span, top = -INFINITY;
        for (int64_t t = 0; t < L[i]; t++) top = si[t] > top ? si[t] : top;
        for (int64_t t = 0; t < L[i]; t++) si[t] = sf_exp(si[t] - top);
        for (int64_t d = 0; d < D; d++) out[i][d] = 0.0f;
    }
    for (int64_t u0 = 0; u0 < most; u0 += SF_ATTEND_BLOCK)
        for (int64_t i = 0; i < n; i++) {
            const int64_t u1 = u0 + SF_ATTEND_BLOCK < L[i] ? u0 + SF_ATTEND_BLOCK : L[i];
            if (u1 > u0) attend_values(s + i * span, values, u0, u1, D, out[i]);
        }
    for (int64_t i = 0; i < n; i++) {
        const float *si = s + i * span;
        float acc[SF_LANES] = {0};
        int64_t t = 0;
        for (; t + SF_LANES <= L[i]; t += SF_LANES)
            for (int l = 0; l < SF_LANES; l++) acc[l] += si[t + l];
        for (int l = 0; t < L[i]; t++, l++) acc[l] += si[t];
        const float total = lanes_sum(acc);
        for (int64_t d = 0; d < D; d++) out[i][d] = out[i][d] / total;
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#define SF_LAYER_OPS .rmsnorm = layer_rmsnorm, .silu_mul = layer_silu_mul, .rope = layer_rope, .attend = layer_attend

#endif /* SF_LAYER_BODY_H */
