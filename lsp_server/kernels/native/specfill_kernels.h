/* specfill's native kernels: y[m, n] = sum_k x[m, k] * W[n, k] with W in GGUF quantized
 * blocks and x fp32, for the few rows of a decode or a speculative verify.
 *
 * Rows are independent: each y[m, n] comes out of the same sequence of float operations
 * whatever M is and whatever the thread count is (threads split N, never K), so an M-row
 * call equals M one-row calls bit for bit, and every variant equals the scalar reference
 * bit for bit. Activations are quantized to int8 per row inside the call (blocks of 256 for
 * K-quant weights, of 32 for Q8_0 / Q5_0 / Q4_0); all integer work is exact.
 *
 * Callers that keep a weight repack it once (sf_repack): 8 weight rows side by side, so a
 * vector lane holds one weight row and a sub-block's scale multiplies once per 8 rows (one
 * thread, 256 MB of Q4_K: ~2x faster than the plain layout at one row, in a one-off probe;
 * docs/benchmarks.md has the project benchmark). The plain types stay for N that is not a
 * multiple of 8.
 *
 * Knows nothing of torch or Python. One caller at a time runs (concurrent calls serialize
 * on an internal lock); the library owns a small persistent thread pool. */
#ifndef SPECFILL_KERNELS_H
#define SPECFILL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum sf_type { SF_Q4_0 = 2, SF_Q5_0 = 6, SF_Q8_0 = 8, SF_Q4_K = 12, SF_Q6_K = 14,  /* ggml type ids */
               SF_Q4_0_X8 = 102, SF_Q5_0_X8 = 106, SF_Q8_0_X8 = 108, SF_Q4_K_X8 = 112, SF_Q6_K_X8 = 114 };  /* after sf_repack */
enum sf_variant { SF_SCALAR = 0, SF_AVX2 = 1, SF_AVX512 = 2, SF_NEON = 3, SF_NVARIANTS = 4 };

enum sf_error {
    SF_OK = 0,
    SF_EBADTYPE = -1,     /* type not one of enum sf_type */
    SF_EBADSHAPE = -2,    /* K not a positive multiple of the block, or N / M negative */
    SF_ENULL = -3,        /* a NULL pointer where data is needed */
    SF_ENOMEM = -4,       /* scratch for the quantized activations could not be had */
    SF_ESTOPPED = -5,     /* sf_request_stop: the layer step stopped part-way */
};

/* Variants. At start-up the library takes SPECFILL_KERNEL = scalar|avx2|avx512|neon|auto
 * when this CPU can run it, else the best one (the caller reports a refused request). */
int sf_variant_supported(int variant);     /* 1 if built in and this CPU can run it */
int sf_variant_best(void);
int sf_set_variant(int variant);           /* 0 ok, -1 refused: never runs what the CPU lacks */
int sf_get_variant(void);
const char *sf_variant_name(int variant);  /* "scalar", "avx2", ...; NULL if out of range */
/* What a variant needs of the CPU, as /proc/cpuinfo names the flags, space-separated ("" for
 * scalar); the same list sf_variant_supported checks. NULL if out of range. */
const char *sf_variant_needs(int variant);

/* Threads, the caller's included; n <= 0 means the CPUs in the affinity mask (default). */
void sf_set_threads(int n);
int sf_get_threads(void);
/* How long an idle worker spins for the next call before it sleeps (default 50 us). */
void sf_set_spin_us(int us);

/* Products of at least m activation rows (m <= 0: none, the default) of a Q4_K or Q6_K
 * matrix repacked by sf_repack, N a multiple of 32, take the wide path where the variant has
 * one (avx512 and the scalar reference): 32 weight rows at a time are dequantized and
 * quantized again to int8 per row and 256 values, into a tile that every activation row then
 * meets (blocks.h sf_wide_block). For a prefill's hundreds of rows: its rows are no longer
 * equal to one-row calls (the weights are rounded once more, ~1/254 of a super-block's
 * largest value), so calls that must be row-independent (the verifies of speculation) stay
 * below m. Each variant's wide path equals the reference's bit for bit. */
void sf_set_wide_rows(int64_t m);
int64_t sf_get_wide_rows(void);
int sf_variant_wide(int variant);  /* 1 if the variant runs here and has the wide path */
/* The same for Q4_0 matrices repacked by sf_repack (m <= 0: none, the default), on every
 * variant that has the wide path: tiles of 32 rows' nibbles, nothing rounded again (blocks.h
 * sf_wide_block_32), so these products equal the repacked kernels' bit for bit and their
 * threshold is only a matter of speed, set apart from the K-quants' (lean_step.py). */
void sf_set_wide_rows_q4_0(int64_t m);
int64_t sf_get_wide_rows_q4_0(void);

int sf_type_supported(int type);
int64_t sf_block_values(int type);                /* 32 or 256; 0 if unsupported */
size_t sf_row_bytes(int type, int64_t K);         /* 0 if K is not a positive multiple */

/* y [M, N] = x [M, K] . W [N, K]^T; W is N rows of sf_row_bytes(type, K) bytes. 0 or sf_error. */
int sf_matmul(int type, const void *w, int64_t N, int64_t K, const float *x, int64_t M, float *y);

/* Q8_0, Q5_0, Q4_0, Q4_K or Q6_K rows repacked 8 by 8 for the kernels (same bytes, lossless): out
 * receives N rows of sf_row_bytes(type, K) bytes and is then passed to sf_matmul as the
 * returned type (type + 100) with the same
 * N and K, giving the same bits as the plain rows. N must be a multiple of 8. Returns the
 * repacked type, or sf_error (SF_EBADTYPE: this type has no repacked form). */
int sf_repack(int type, const void *w, int64_t N, int64_t K, void *out);

/* The float steps of a decoder layer around its products, for decode steps and verifies
 * (layer_body.h). Rows in, rows out: each row's bits are the same whatever M, the variant
 * and the threads. K and D are multiples of 16, D <= 512. 0 or sf_error. */
int sf_rmsnorm(const float *x, const float *w, int64_t M, int64_t K, float eps, float *out);
/* out [M, F] = silu(gate) * up for rows gate_up [M, 2F] = [gate | up] */
int sf_silu_mul(const float *gate_up, int64_t M, int64_t F, float *out);
/* One layer's attention for M new positions past..past+M-1: rotates q (M rows of H * D
 * floats, q_stride apart) and k (M rows of KV * D, kv_stride apart, as v) in place with
 * cos / sin [M, D], stores k and v into the caches [KV, cap, D] at past.., then
 * out [M, H * D] = softmax(q k^T * scale) v per head, row j seeing positions 0..past+j and
 * query head h reading key-value head h / (H / KV). */
int sf_attention(float *q, int64_t q_stride, float *k, const float *v, int64_t kv_stride, int64_t M, int64_t H,
                 int64_t KV, int64_t D, const float *cos, const float *sin, float *k_cache, float *v_cache,
                 int64_t cap, int64_t past, float scale, float *out);

/* A whole decoder layer (pre-norm attention, then a SiLU-gated MLP, each added back to x) for
 * the rows of a decode step or a verify, in one call: what sf_rmsnorm, sf_matmul,
 * sf_attention and sf_silu_mul compute one after another, to the bit, without a return to
 * the caller between them (in a decode step of the 0.5B draft, ~3 ms of ~20 went into
 * Python between those calls). A matrix group (q|k|v, gate|up) is one matrix where the
 * file's block types agree and two or three where they differ; their outputs lie side by
 * side. Biases may be NULL. */
struct sf_matrix {
    int type;           /* enum sf_type, repacked forms included */
    const void *w;
    int64_t N;          /* output rows; K follows from the layer's shape */
};
struct sf_layer {
    struct sf_matrix qkv[3];      /* [q (heads * head_dim) | k (kv_heads * head_dim) | v (same)] */
    int n_qkv;
    struct sf_matrix o;           /* K = heads * head_dim, N = hidden */
    struct sf_matrix gate_up[2];  /* [gate (ffn) | up (ffn)] */
    int n_gate_up;
    struct sf_matrix down;        /* K = ffn, N = hidden */
    const float *qkv_bias, *o_bias, *gate_up_bias, *down_bias;
    const float *attn_norm, *ffn_norm;  /* RMSNorm weights [hidden] */
    float eps;
    int64_t hidden, heads, kv_heads, head_dim, ffn;
    float scale;                  /* of the attention scores */
};
/* A stop request for the layer step in progress on a thread that listens for it
 * (sf_listen_for_stop(1) on that thread; none does by default): it returns SF_ESTOPPED at its
 * next check, between its steps or inside a matrix product (every ~128 KB of weights a
 * thread reads), so that a background job's layer need not run to its end when a real
 * request comes (a 16-row layer of the 1.5B target is ~3 ms, and more
 * when the caller's other threads share the cores). x is then partly updated and the cache
 * written at past..: the caller drops both. Sticky until sf_clear_stop; safe from any thread. */
void sf_listen_for_stop(int on);
void sf_request_stop(void);
void sf_clear_stop(void);

/* x [M, hidden] is updated in place; k_cache / v_cache [kv_heads, cap, head_dim] are this
 * layer's, written at past..past+M-1; cos, sin [M, head_dim]. 0 or sf_error. */
int sf_layer_step(const struct sf_layer *layer, float *x, int64_t M, const float *cos, const float *sin,
                  float *k_cache, float *v_cache, int64_t cap, int64_t past);

/* The reference dequantizer (scalar, matches gguf.quants.dequantize bit for bit); not for
 * repacked types. */
int sf_dequantize_rows(int type, const void *w, int64_t rows, int64_t K, float *out);

/* Rows of a plain block type dequantized (as sf_dequantize_rows) and quantized again to
 * to_type, today Q4_0 only, with ggml's reference rounding (gguf.quants.quantize gives the
 * same bytes): for a draft model, whose weights may be coarser than its file's (they change
 * acceptance, never the output). out receives rows * sf_row_bytes(to_type, K) bytes. */
int sf_requantize_rows(int type, const void *w, int64_t rows, int64_t K, int to_type, void *out);

/* What `bench kernels` sets the products against (peak.c). sf_dot_peak: the int8 multiply-adds
 * a nanosecond (= GMAC/s) of `form` of variant's dot-product instruction on registers alone,
 * `iters` rounds of 16 chains on every thread at once (sf_set_threads); < 0 where the variant
 * cannot run here or has no such form; sf_dot_form names it (NULL: none). sf_read_bytes
 * reads `bytes` at p once, split over the threads, as plainly as memory can be read (the
 * rate a one-row pass over weights can at best stream at); returns a checksum. */
const char *sf_dot_form(int variant, int form);
double sf_dot_peak(int variant, int form, int64_t iters);
uint64_t sf_read_bytes(const void *p, size_t bytes);

/* Test hooks: the activation blocks sf_matmul makes (with the current variant) for weights
 * of `type`; out must hold M * sf_act_row_bytes(type, K) bytes. */
size_t sf_act_row_bytes(int type, int64_t K);
int sf_quantize_acts(int type, const float *x, int64_t M, int64_t K, void *out);

#ifdef __cplusplus
}
#endif

#endif /* SPECFILL_KERNELS_H */
