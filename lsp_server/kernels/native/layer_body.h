/* The float steps of a decoder layer around its matrix products, for the few rows of a
 * decode step or a verify: RMSNorm, rotary embedding, attention over the KV cache, SiLU.
 *
 * Portable C, included by ref.c and by each ISA file after its target pragma: the compiler
 * vectorizes the same source for each ISA. Every loop that carries a float sum keeps
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

/* Keys (and values) a block of the cache holds: 32 of D = 128 floats, 16 KB, stay in L1 while
 * every query of the call passes over them. */
#define SF_ATTEND_BLOCK 32
/* Keys one query meets at once: their partial sums stay in registers beside the query's. */
#define SF_ATTEND_KEYS 4

/* s[t] = (q . keys[t]) * scale for t in [t0, t1): SF_LANES partial sums a key over d in
 * order, then lanes_sum, as one key at a time would; SF_ATTEND_KEYS keys share each load of q. */
static inline void attend_scores(const float *q, const float *keys, int64_t t0, int64_t t1, int64_t D,
                                 float scale, float *s) {
    int64_t t = t0;
    for (; t + SF_ATTEND_KEYS <= t1; t += SF_ATTEND_KEYS) {
        float acc[SF_ATTEND_KEYS][SF_LANES] = {{0}};
        for (int64_t d = 0; d < D; d += SF_LANES)
            for (int j = 0; j < SF_ATTEND_KEYS; j++)
                for (int l = 0; l < SF_LANES; l++) acc[j][l] += q[d + l] * keys[(t + j) * D + d + l];
        for (int j = 0; j < SF_ATTEND_KEYS; j++) s[t + j] = lanes_sum(acc[j]) * scale;
    }
    for (; t < t1; t++) {
        float acc[SF_LANES] = {0};
        for (int64_t d = 0; d < D; d += SF_LANES)
            for (int l = 0; l < SF_LANES; l++) acc[l] += q[d + l] * keys[t * D + d + l];
        s[t] = lanes_sum(acc) * scale;
    }
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
    for (int64_t t0 = 0; t0 < most; t0 += SF_ATTEND_BLOCK)
        for (int64_t i = 0; i < n; i++) {
            const int64_t t1 = t0 + SF_ATTEND_BLOCK < L[i] ? t0 + SF_ATTEND_BLOCK : L[i];
            if (t1 > t0) attend_scores(q[i], keys, t0, t1, D, scale, s + i * span);
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
