/* Every variant this CPU runs against the scalar reference, bit for bit, on random data;
 * no Python. Built from the C sources alone, so it also runs cross-compiled under qemu:
 *
 *   cc -O2 -ffp-contract=off -pthread -I lsp_server/kernels/native tests/kernels/native_selftest.c \
 *      lsp_server/kernels/native/{ref,avx2,avx512,neon,variants,pool,matmul,layer}.c -lm && ./a.out
 *
 * Prints "N passed, M failed" and exits non-zero when anything failed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "specfill_kernels.h"

#include "blocks.h"      /* no contraction here either */
#include "layer_body.h"  /* lanes_sum and sf_exp for the attention written out below */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static float rnd_normal(void) {  /* sum of 4 uniforms: enough for test data */
    float s = 0.0f;
    for (int i = 0; i < 4; i++) s += (float)(rnd() & 0xffff) / 65536.0f - 0.5f;
    return s;
}

/* A finite fp16: sign, exponent 0..14 (subnormals included), random mantissa. */
static uint16_t rnd_fp16(void) {
    return (uint16_t)(((rnd() & 1) << 15) | ((rnd() % 15) << 10) | (rnd() & 0x3ff));
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static void fill_weights(int type, uint8_t *w, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    const size_t bs = type == SF_Q8_0 ? 34 : type == SF_Q5_0 ? 22 : type == SF_Q4_0 ? 18 : type == SF_Q4_K ? 144 : 210;
    for (size_t b = 0; b + bs <= bytes; b += bs) {
        if (type == SF_Q6_K) put16(w + b + 208, rnd_fp16());
        else put16(w + b, rnd_fp16());
        if (type == SF_Q4_K) put16(w + b + 2, rnd_fp16());
    }
}

/* x rows: normal values, with an all-zero block, a tiny block and a huge-range row */
static void fill_x(float *x, int64_t M, int64_t K) {
    for (int64_t i = 0; i < M * K; i++) x[i] = rnd_normal() * 3.0f;
    if (M > 1) memset(x + K, 0, 32 * sizeof(float));
    if (M > 2) for (int i = 0; i < 32; i++) x[2 * K + i] = 1e-33f * (float)i;
    if (M > 3) for (int64_t i = 0; i < K; i++) x[3 * K + i] *= (i % 7) ? 1e-3f : 1e4f;
}

static int passed, failed;

static void check(int ok, const char *what, int type, const char *variant, int64_t M, int64_t N, int64_t K) {
    if (ok) passed++;
    else {
        failed++;
        printf("FAIL %s: type %d variant %s M=%lld N=%lld K=%lld\n", what, type, variant, (long long)M,
               (long long)N, (long long)K);
    }
}

static int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* Every variant, 1-3 threads, against ref; M rows at once against M one-row calls. `mm_type`
 * is the type w is passed as (a repacked type for repacked w); `type` names the case. */
static void check_variants(int type, int mm_type, const uint8_t *w, int64_t N, int64_t K, const float *x, int64_t M,
                           const float *ref, float *y, float *one, const char *label) {
    char what[96];
    for (int v = 0; v < SF_NVARIANTS; v++) {
        if (!sf_variant_supported(v)) continue;
        const char *name = sf_variant_name(v);
        sf_set_variant(v);
        for (int threads = 1; threads <= 3; threads++) {
            sf_set_threads(threads);
            memset(y, 0xff, M * N * sizeof(float));
            snprintf(what, sizeof what, "%smatmul returns 0", label);
            check(sf_matmul(mm_type, w, N, K, x, M, y) == 0, what, type, name, M, N, K);
            snprintf(what, sizeof what, "%smatmul == reference", label);
            check(same_bits(ref, y, M * N), what, type, name, M, N, K);
        }
        int rows_ok = 1;
        for (int64_t m = 0; m < M; m++) {
            sf_matmul(mm_type, w, N, K, x + m * K, 1, one);
            rows_ok &= same_bits(ref + m * N, one, N);
        }
        snprintf(what, sizeof what, "%sM-row call == M one-row calls", label);
        check(rows_ok, what, type, name, M, N, K);
    }
}

static void run_case(int type, int64_t N, int64_t K, int64_t M) {
    const size_t rb = sf_row_bytes(type, K), xrb = sf_act_row_bytes(type, K);
    uint8_t *w = malloc(N * rb), *qa = malloc(M * xrb), *qb = malloc(M * xrb);
    float *x = malloc(M * K * sizeof(float));
    float *ref = malloc(M * N * sizeof(float)), *y = malloc(M * N * sizeof(float));
    float *one = malloc(N * sizeof(float));
    fill_weights(type, w, N * rb);
    fill_x(x, M, K);

    sf_set_variant(SF_SCALAR);
    sf_set_threads(1);
    sf_matmul(type, w, N, K, x, M, ref);
    sf_quantize_acts(type, x, M, K, qa);
    int finite = 1;
    for (int64_t i = 0; i < M * N; i++) finite &= isfinite(ref[i]) != 0;
    check(finite, "reference output finite", type, "scalar", M, N, K);

    for (int v = 0; v < SF_NVARIANTS; v++) {
        if (!sf_variant_supported(v)) continue;
        sf_set_variant(v);
        sf_quantize_acts(type, x, M, K, qb);
        check(memcmp(qa, qb, M * xrb) == 0, "activation blocks == reference", type, sf_variant_name(v), M, N, K);
    }
    check_variants(type, type, w, N, K, x, M, ref, y, one, "");
    if (N % 8 == 0) {  /* repacked 8 rows by 8: the plain rows' bits */
        uint8_t *w8 = malloc(N * rb);
        const int x8 = type + 100;
        check(sf_repack(type, w, N, K, w8) == x8, "repack returns the x8 type", type, "-", M, N, K);
        check_variants(type, x8, w8, N, K, x, M, ref, y, one, "x8 ");
        free(w8);
    }
    free(w); free(qa); free(qb); free(x); free(ref); free(y); free(one);
}

static void run_specials(void) {
    /* a NaN or an infinity in a row reaches its outputs in every variant */
    const int64_t K = 512, N = 5;
    const int types[] = {SF_Q8_0, SF_Q5_0, SF_Q4_0, SF_Q4_K, SF_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const size_t rb = sf_row_bytes(types[t], K);
        uint8_t *w = malloc(N * rb);
        float x[3 * 512], y[3 * 5];
        fill_weights(types[t], w, N * rb);
        fill_x(x, 3, K);
        x[K + 7] = NAN;
        x[2 * K + 300] = INFINITY;
        for (int v = 0; v < SF_NVARIANTS; v++) {
            if (!sf_variant_supported(v)) continue;
            sf_set_variant(v);
            sf_matmul(types[t], w, N, K, x, 3, y);
            int ok = 1;
            for (int n = 0; n < N; n++) ok &= isfinite(y[n]) && isnan(y[N + n]) && isnan(y[2 * N + n]);
            check(ok, "NaN / inf rows give NaN, others finite", types[t], sf_variant_name(v), 3, N, K);
        }
        free(w);
    }
    /* shapes the API refuses */
    check(sf_row_bytes(SF_Q4_K, 300) == 0 && sf_row_bytes(SF_Q8_0, 33) == 0, "row_bytes 0 for bad K", 0, "-", 0, 0, 0);
    float y1;
    check(sf_matmul(SF_Q4_K, &y1, 1, 300, &y1, 1, &y1) == SF_EBADSHAPE, "matmul refuses bad K", SF_Q4_K, "-", 1, 1, 300);
    check(sf_matmul(99, &y1, 1, 256, &y1, 1, &y1) == SF_EBADTYPE, "matmul refuses bad type", 99, "-", 1, 1, 256);
    check(sf_matmul(SF_Q4_K_X8, &y1, 12, 256, &y1, 1, &y1) == SF_EBADSHAPE, "x8 matmul refuses N % 8", SF_Q4_K_X8, "-", 1, 12, 256);
    check(sf_repack(SF_Q4_K, &y1, 12, 256, &y1) == SF_EBADSHAPE, "repack refuses N % 8", SF_Q4_K, "-", 0, 12, 256);
    check(sf_repack(SF_Q4_0_X8, &y1, 8, 256, &y1) == SF_EBADTYPE, "repack refuses a type with no x8 form", SF_Q4_0_X8, "-", 0, 8, 256);
    check(sf_dequantize_rows(SF_Q4_K_X8, &y1, 8, 256, &y1) == SF_EBADTYPE, "dequantize refuses x8", SF_Q4_K_X8, "-", 0, 8, 256);
    check(sf_set_variant(SF_NVARIANTS) == -1, "set_variant refuses out of range", 0, "-", 0, 0, 0);
    for (int v = 0; v < SF_NVARIANTS; v++)
        if (!sf_variant_supported(v)) check(sf_set_variant(v) == -1, "set_variant refuses what the CPU lacks", 0, sf_variant_name(v), 0, 0, 0);
}

/* Random queries and new keys / values, and a rotary table, for sf_attention. */
static void attention_inputs(float *q, int nq, float *kv, int nkv, float *cs, float *sn, int nrot) {
    for (int i = 0; i < nq; i++) q[i] = rnd_normal();
    for (int i = 0; i < nkv; i++) kv[i] = rnd_normal();
    for (int i = 0; i < nrot; i++) cs[i] = cosf((float)i * 0.01f), sn[i] = sinf((float)i * 0.01f);
}

/* The float steps of a layer (layer_body.h, compiled per variant): every variant's bits are
 * the reference's, whatever M (rows are independent). */
static void run_layer_ops(void) {
    enum { M = 5, K = 1536, F = 256, H = 4, KV = 2, D = 64, CAP = 40, PAST = 29 };
    static float x[M * K], w[K], gu[M * 2 * F], q0[M * H * D], kv0[M * 2 * KV * D], cs[M * D], sn[M * D];
    static float out[SF_NVARIANTS][M * K], act[SF_NVARIANTS][M * F], att[SF_NVARIANTS][M * H * D];
    static float q[M * H * D], kv[M * 2 * KV * D], kc[KV * CAP * D], vc[KV * CAP * D];
    static float kcs[SF_NVARIANTS][KV * CAP * D], one[M * K];
    for (int i = 0; i < M * K; i++) x[i] = rnd_normal() * 4.0f;
    for (int i = 0; i < K; i++) w[i] = rnd_normal();
    for (int i = 0; i < M * 2 * F; i++) gu[i] = rnd_normal() * 8.0f;
    attention_inputs(q0, M * H * D, kv0, M * 2 * KV * D, cs, sn, M * D);
    for (int v = 0; v < SF_NVARIANTS; v++) {
        if (!sf_variant_supported(v)) continue;
        sf_set_variant(v);
        const char *name = sf_variant_name(v);
        check(sf_rmsnorm(x, w, M, K, 1e-6f, out[v]) == 0, "rmsnorm returns 0", 0, name, M, 0, K);
        check(sf_silu_mul(gu, M, F, act[v]) == 0, "silu_mul returns 0", 0, name, M, F, 0);
        memcpy(q, q0, sizeof q);
        memcpy(kv, kv0, sizeof kv);
        for (int i = 0; i < KV * CAP * D; i++) kc[i] = vc[i] = (float)(i % 97) * 0.01f;  /* the past */
        check(sf_attention(q, H * D, kv, kv + KV * D, 2 * KV * D, M, H, KV, D, cs, sn, kc, vc, CAP, PAST,
                           0.125f, att[v]) == 0, "attention returns 0", 0, name, M, H, D);
        memcpy(kcs[v], kc, sizeof kc);
        int rows_ok = 1;  /* one row at a time gives each row's bits */
        for (int m = 0; m < M; m++) {
            sf_rmsnorm(x + m * K, w, 1, K, 1e-6f, one);
            rows_ok &= same_bits(one, out[v] + m * K, K);
        }
        check(rows_ok, "rmsnorm: one-row calls == M-row call", 0, name, M, 0, K);
        /* attention a row at a time, the cache growing by one row a call (a decode step):
         * each row's bits are the M-row call's, whatever the queries taken with it */
        static float q1[H * D], kv1[2 * KV * D], att1[H * D];
        for (int i = 0; i < KV * CAP * D; i++) kc[i] = vc[i] = (float)(i % 97) * 0.01f;
        rows_ok = 1;
        for (int m = 0; m < M; m++) {
            memcpy(q1, q0 + m * H * D, sizeof q1);
            memcpy(kv1, kv0 + m * 2 * KV * D, sizeof kv1);
            sf_attention(q1, H * D, kv1, kv1 + KV * D, 2 * KV * D, 1, H, KV, D, cs + m * D, sn + m * D, kc, vc, CAP,
                         PAST + m, 0.125f, att1);
            rows_ok &= same_bits(att1, att[v] + m * H * D, H * D);
        }
        check(rows_ok, "attention: one-row calls == M-row call", 0, name, M, H, D);
        if (v == SF_SCALAR) continue;
        check(same_bits(out[v], out[SF_SCALAR], M * K), "rmsnorm == reference", 0, name, M, 0, K);
        check(same_bits(act[v], act[SF_SCALAR], M * F), "silu_mul == reference", 0, name, M, F, 0);
        check(same_bits(att[v], att[SF_SCALAR], M * H * D), "attention == reference", 0, name, M, H, D);
        check(same_bits(kcs[v], kcs[SF_SCALAR], KV * CAP * D), "rotated keys in the cache == reference", 0, name, M, H, D);
    }
}

/* Attention over a long cache on 1 and on 8 threads: with 8, a key-value head's query heads
 * are split between threads (layer.c's parts); every split gives the same bits. */
static void run_attention_split(void) {
    enum { M = 3, H = 4, KV = 2, D = 64, CAP = 1100, PAST = 1090 };
    static float q0[M * H * D], kv0[M * 2 * KV * D], cs[M * D], sn[M * D], q[M * H * D], kv[M * 2 * KV * D];
    static float kc[KV * CAP * D], vc[KV * CAP * D], att[2][M * H * D];
    attention_inputs(q0, M * H * D, kv0, M * 2 * KV * D, cs, sn, M * D);
    for (int v = 0; v < SF_NVARIANTS; v++) {
        if (!sf_variant_supported(v)) continue;
        sf_set_variant(v);
        const int threads[2] = {1, 8};
        for (int t = 0; t < 2; t++) {
            sf_set_threads(threads[t]);
            memcpy(q, q0, sizeof q);
            memcpy(kv, kv0, sizeof kv);
            for (int i = 0; i < KV * CAP * D; i++) kc[i] = vc[i] = (float)(i % 89) * 0.01f;
            check(sf_attention(q, H * D, kv, kv + KV * D, 2 * KV * D, M, H, KV, D, cs, sn, kc, vc, CAP, PAST, 0.1f,
                               att[t]) == 0, "attention returns 0", threads[t], sf_variant_name(v), M, H, D);
        }
        check(same_bits(att[0], att[1], M * H * D), "attention: 8 threads == 1 thread", 8, sf_variant_name(v), M, H, D);
    }
    sf_set_threads(0);
}

/* Attention written out one query and one key at a time, in the order layer_body.h keeps
 * whatever its loops: a key's score is 16 partial sums over d in order from +0.0, lanes_sum,
 * * scale; then the maximum, sf_exp, the values summed in key order and the total of 16
 * partial sums over the keys. q, keys and values as sf_attention left them (q rotated). */
static void attention_one_at_a_time(const float *q, const float *kc, const float *vc, int64_t M, int64_t H, int64_t KV,
                                    int64_t D, int64_t cap, int64_t past, float scale, float *out) {
    static float s[4096];
    for (int64_t j = 0; j < M; j++)
        for (int64_t h = 0; h < H; h++) {
            const float *qh = q + (j * H + h) * D, *k = kc + h / (H / KV) * cap * D, *v = vc + h / (H / KV) * cap * D;
            float *o = out + (j * H + h) * D, top = -INFINITY, acc[SF_LANES] = {0};
            const int64_t L = past + j + 1;
            for (int64_t t = 0; t < L; t++) {
                float a[SF_LANES] = {0};
                for (int64_t d = 0; d < D; d += SF_LANES)
                    for (int l = 0; l < SF_LANES; l++) a[l] += qh[d + l] * k[t * D + d + l];
                s[t] = lanes_sum(a) * scale;
                top = s[t] > top ? s[t] : top;
            }
            for (int64_t t = 0; t < L; t++) s[t] = sf_exp(s[t] - top);
            for (int64_t d = 0; d < D; d++) {
                o[d] = 0.0f;
                for (int64_t t = 0; t < L; t++) o[d] += s[t] * v[t * D + d];
            }
            for (int64_t t = 0; t < L; t++) acc[t % SF_LANES] += s[t];
            const float total = lanes_sum(acc);
            for (int64_t d = 0; d < D; d++) o[d] = o[d] / total;
        }
}

/* Every variant's attention against attention_one_at_a_time: the rows of a call end at
 * different keys, most of them inside a block of 16 or 32 (the scores run 16 keys at once),
 * D not always a multiple of 32 or 64, 1 and 2 threads. */
static void run_attention_one_at_a_time(void) {
    enum { M = 7, H = 12, KV = 2, CAP = 80 };
    const int64_t Ds[] = {48, 128}, pasts[] = {0, 9, 26, 40, 73};
    static float q0[M * H * 128], kv0[M * 2 * KV * 128], cs[M * 128], sn[M * 128], q[M * H * 128];
    static float kv[M * 2 * KV * 128], kc[KV * CAP * 128], vc[KV * CAP * 128], att[M * H * 128], ref[M * H * 128];
    for (int di = 0; di < 2; di++)
        for (int pi = 0; pi < 5; pi++) {
            const int64_t D = Ds[di], past = pasts[pi];
            attention_inputs(q0, M * H * D, kv0, M * 2 * KV * D, cs, sn, M * D);
            for (int v = 0; v < SF_NVARIANTS; v++) {
                if (!sf_variant_supported(v)) continue;
                sf_set_variant(v);
                for (int threads = 1; threads <= 2; threads++) {
                    sf_set_threads(threads);
                    memcpy(q, q0, sizeof q);
                    memcpy(kv, kv0, sizeof kv);
                    for (int i = 0; i < KV * CAP * 128; i++) kc[i] = rnd_normal(), vc[i] = rnd_normal();
                    memset(att, 0xff, sizeof att);
                    check(sf_attention(q, H * D, kv, kv + KV * D, 2 * KV * D, M, H, KV, D, cs, sn, kc, vc, CAP, past,
                                       0.09f, att) == 0, "attention returns 0", threads, sf_variant_name(v), M, H, D);
                    attention_one_at_a_time(q, kc, vc, M, H, KV, D, CAP, past, 0.09f, ref);
                    check(same_bits(att, ref, M * H * D), "attention == one query and one key at a time", (int)past,
                          sf_variant_name(v), M, H, D);
                }
            }
        }
    sf_set_threads(0);
}

/* The wide path (sf_set_wide_rows): every variant that has it against the reference's, bit
 * for bit, 1-3 threads; M rows at once against one-row calls (the tile is the same whatever M). */
/* Every variant with a wide path, the wide path switched on, 1-3 threads, against `ref` (the
 * M rows' products as the caller made them) bit for bit; and the M-row call against M one-row
 * calls (rows independent). */
static void check_wide_variants(int x8, const uint8_t *w8, int64_t N, int64_t K, const float *x, int64_t M,
                                const float *ref, int type, const char *same, const char *rows) {
    float *y = malloc(M * N * sizeof(float)), *one = malloc(N * sizeof(float));
    for (int v = 0; v < SF_NVARIANTS; v++) {
        if (!sf_variant_wide(v)) continue;
        sf_set_variant(v);
        for (int threads = 1; threads <= 3; threads++) {
            sf_set_threads(threads);
            memset(y, 0xff, M * N * sizeof(float));
            check(sf_matmul(x8, w8, N, K, x, M, y) == 0 && same_bits(ref, y, M * N), same, type, sf_variant_name(v),
                  M, N, K);
        }
        int rows_ok = 1;
        for (int64_t m = 0; m < M; m++) {
            sf_matmul(x8, w8, N, K, x + m * K, 1, one);
            rows_ok &= same_bits(ref + m * N, one, N);
        }
        check(rows_ok, rows, type, sf_variant_name(v), M, N, K);
    }
    free(y);
    free(one);
}

static void run_wide(void) {
    const int types[] = {SF_Q4_K, SF_Q6_K};
    /* every tail (1-5 rows) of the 6-row passes of AVX2 (avx2_wide.h) and AVX-512 (x86_wide.h) */
    const int64_t Ns[] = {32, 96}, Ks[] = {256, 768, 2816}, Ms[] = {1, 2, 3, 4, 5, 6, 7, 13, 17};
    for (int t = 0; t < 2; t++)
        for (int ni = 0; ni < 2; ni++)
            for (int ki = 0; ki < 3; ki++)
                for (int mi = 0; mi < 9; mi++) {
                    const int type = types[t];
                    const int64_t N = Ns[ni], K = Ks[ki], M = Ms[mi];
                    const size_t rb = sf_row_bytes(type, K);
                    uint8_t *w = malloc(N * rb), *w8 = malloc(N * rb);
                    float *x = malloc(M * K * sizeof(float)), *ref = malloc(M * N * sizeof(float));
                    fill_weights(type, w, N * rb);
                    fill_x(x, M, K);
                    const int x8 = sf_repack(type, w, N, K, w8);
                    sf_set_wide_rows(1);
                    sf_set_variant(SF_SCALAR);
                    sf_set_threads(1);
                    sf_matmul(x8, w8, N, K, x, M, ref);
                    check_wide_variants(x8, w8, N, K, x, M, ref, type, "wide == reference",
                                        "wide M-row call == M one-row calls");
                    sf_set_wide_rows(0);
                    free(w); free(w8); free(x); free(ref);
                }
}

/* The Q4_0 wide path (blocks.h sf_wide_block_32): every variant that has it, and the
 * reference's own, against the repacked kernels (the wide path off), bit for bit, 1-3
 * threads: K = 896 and 4864 (the draft's), one block (seven empty float lanes) and 11 (a
 * tail of 3 after a round of 8), every tail of the 6-row (AVX-512) and 3-row (AVX2) passes;
 * with `specials`, +inf, NaN and -inf weight scales and a NaN and an infinity in two
 * activation rows. */
static void run_wide_q4_0(void) {
    const int64_t Ns[] = {32, 96}, Ks[] = {32, 352, 896, 4864}, Ms[] = {1, 2, 3, 4, 5, 6, 7, 13, 17};
    for (int specials = 0; specials < 2; specials++)
        for (int ni = 0; ni < 2; ni++)
            for (int ki = 0; ki < 4; ki++)
                for (int mi = 0; mi < 9; mi++) {
                    const int64_t N = Ns[ni], K = Ks[ki], M = Ms[mi];
                    if (specials && (ni == 1 || mi < 6)) continue;
                    const size_t rb = sf_row_bytes(SF_Q4_0, K);
                    uint8_t *w = malloc(N * rb), *w8 = malloc(N * rb);
                    float *x = malloc(M * K * sizeof(float)), *ref = malloc(M * N * sizeof(float));
                    fill_weights(SF_Q4_0, w, N * rb);
                    fill_x(x, M, K);
                    if (specials) {
                        const uint16_t bad[3] = {0x7c00, 0x7e00, 0xfc00};
                        for (int b = 0; b < 3; b++)  /* rows 5, 16, 27, blocks 0, 1, 2 (where K has them) */
                            put16(w + (size_t)((5 + 11 * b) % N) * rb + (size_t)(b % (K / 32)) * 18, bad[b]);
                        x[4 * K + K / 2] = NAN;
                        x[5 * K + 3] = INFINITY;
                    }
                    const int x8 = sf_repack(SF_Q4_0, w, N, K, w8);
                    sf_set_wide_rows_q4_0(0);
                    sf_set_variant(SF_SCALAR);
                    sf_set_threads(1);
                    sf_matmul(x8, w8, N, K, x, M, ref);
                    sf_set_wide_rows_q4_0(1);
                    check_wide_variants(x8, w8, N, K, x, M, ref, SF_Q4_0,
                                        specials ? "Q4_0 wide == repacked, inf/NaN" : "Q4_0 wide == repacked",
                                        "Q4_0 wide M-row call == M one-row calls");
                    sf_set_wide_rows_q4_0(0);
                    free(w); free(w8); free(x); free(ref);
                }
}

int main(void) {
    const int types[] = {SF_Q8_0, SF_Q5_0, SF_Q4_0, SF_Q4_K, SF_Q6_K};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const int64_t qk = sf_block_values(types[t]);
        const int64_t Ks[] = {qk, qk * 3, qk * 11};  /* 11 blocks: a group of 8 and a tail of 3 */
        const int64_t Ns[] = {1, 7, 8, 37, 40, 300, 1000};
        const int64_t Ms[] = {1, 2, 3, 5, 9, 13, 17};  /* 17 = 8 + 8 + 1 = 6 + 6 + 5 = 4 * 4 + 1 */
        for (int ki = 0; ki < 3; ki++)
            for (int ni = 0; ni < 7; ni++)
                for (int mi = 0; mi < 7; mi++)
                    if (Ns[ni] * Ks[ki] <= 300 * 1280 || (ki == 2 && Ms[mi] == 9)) run_case(types[t], Ns[ni], Ks[ki], Ms[mi]);
    }
    run_specials();
    run_layer_ops();
    run_attention_split();
    run_attention_one_at_a_time();
    run_wide();
    run_wide_q4_0();
    sf_set_threads(0);
    printf("variants run:");
    for (int v = 0; v < SF_NVARIANTS; v++)
        if (sf_variant_supported(v)) printf(" %s", sf_variant_name(v));
    printf("\n%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
