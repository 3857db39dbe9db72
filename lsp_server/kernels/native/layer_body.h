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

/* One query row against keys / values [L, D] of its key-value head: softmax(q k^T * scale) v.
 * `s` holds L floats of scratch; D a multiple of SF_LANES. */
static void layer_attend(const float *q, const float *keys, const float *values, int64_t L, int64_t D,
                         float scale, float *s, float *out) {
    float top = -INFINITY;
    for (int64_t t = 0; t < L; t++) {
        const float *k = keys + t * D;
        float acc[SF_LANES] = {0};
        for (int64_t d = 0; d < D; d += SF_LANES)
            for (int l = 0; l < SF_LANES; l++) acc[l] += q[d + l] * k[d + l];
        s[t] = lanes_sum(acc) * scale;
        top = s[t] > top ? s[t] : top;
    }
    for (int64_t t = 0; t < L; t++) s[t] = sf_exp(s[t] - top);
    float acc[SF_LANES] = {0};
    int64_t t = 0;
    for (; t + SF_LANES <= L; t += SF_LANES)
        for (int l = 0; l < SF_LANES; l++) acc[l] += s[t + l];
    for (int l = 0; t < L; t++, l++) acc[l] += s[t];
    const float total = lanes_sum(acc);
    for (int64_t d = 0; d < D; d++) out[d] = 0.0f;
    for (int64_t u = 0; u < L; u++) {
        const float p = s[u], *v = values + u * D;
        for (int64_t d = 0; d < D; d++) out[d] += p * v[d];
    }
    for (int64_t d = 0; d < D; d++) out[d] = out[d] / total;
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#define SF_LAYER_OPS .rmsnorm = layer_rmsnorm, .silu_mul = layer_silu_mul, .rope = layer_rope, .attend = layer_attend

#endif /* SF_LAYER_BODY_H */
