/* The products: block types and their sizes, the activation quantization, sf_matmul split
 * over the pool, the load-time repack and the reference (de/re)quantizers. */
#include "internal.h"

#include <stdlib.h>

#include "specfill_kernels.h"

#define SF_ROW_ALIGN 16           /* rows per unit of the N split: y stays in whole cache lines */
#define SF_CHUNK_BYTES (128 * 1024)  /* weight bytes per call of a rows kernel, at most */
#define SF_CHUNKS_PER_SHARE 8     /* chunks a share at least, where N allows (1 and 32: the same within noise) */

static void *scratch;             /* quantized activations, reused across calls; under the call lock */
static size_t scratch_cap;

static int64_t block_values(int type) {
    switch (type) {
    case SF_Q8_0: case SF_Q5_0: case SF_Q4_0: case SF_Q8_0_X8: case SF_Q5_0_X8: case SF_Q4_0_X8: return SF_QK32;
    case SF_Q4_K: case SF_Q6_K: case SF_Q4_K_X8: case SF_Q6_K_X8: return SF_QKK;
    default: return 0;
    }
}

static size_t block_bytes(int type) {
    switch (type) {
    case SF_Q8_0: case SF_Q8_0_X8: return sizeof(sf_block_q8_0);  /* per row */
    case SF_Q5_0: case SF_Q5_0_X8: return sizeof(sf_block_q5_0);
    case SF_Q4_0: case SF_Q4_0_X8: return sizeof(sf_block_q4_0);
    case SF_Q4_K: case SF_Q4_K_X8: return sizeof(sf_block_q4_K);
    case SF_Q6_K: case SF_Q6_K_X8: return sizeof(sf_block_q6_K);
    default: return 0;
    }
}

static int is_x8(int type) {
    return type == SF_Q8_0_X8 || type == SF_Q5_0_X8 || type == SF_Q4_0_X8 || type == SF_Q4_K_X8 || type == SF_Q6_K_X8;
}

int sf_type_supported(int type) { return block_values(type) != 0; }
int64_t sf_block_values(int type) { return block_values(type); }

static int shape_ok(int type, int64_t K) {
    const int64_t qk = block_values(type);
    return qk != 0 && K > 0 && K % qk == 0;
}

size_t sf_row_bytes(int type, int64_t K) {
    return shape_ok(type, K) ? (size_t)(K / block_values(type)) * block_bytes(type) : 0;
}

size_t sf_act_row_bytes(int type, int64_t K) {
    if (!shape_ok(type, K)) return 0;
    return block_values(type) == SF_QKK ? sf_act_bytes_k(K) : sf_act_bytes_32(K);
}

static sf_rows_fn rows_fn(const struct sf_kernels *k, int type) {
    switch (type) {
    case SF_Q8_0: return k->q8_0;
    case SF_Q5_0: return k->q5_0;
    case SF_Q4_0: return k->q4_0;
    case SF_Q4_K: return k->q4_K;
    case SF_Q6_K: return k->q6_K;
    case SF_Q8_0_X8: return k->q8_0_x8;
    case SF_Q5_0_X8: return k->q5_0_x8;
    case SF_Q4_0_X8: return k->q4_0_x8;
    case SF_Q4_K_X8: return k->q4_K_x8;
    case SF_Q6_K_X8: return k->q6_K_x8;
    default: return NULL;
    }
}

static void quantize_acts(const struct sf_kernels *k, int type, const float *x, int64_t M, int64_t K,
                          uint8_t *out) {
    const sf_quant_fn quant = block_values(type) == SF_QKK ? k->quant_k : k->quant_32;
    const size_t rb = sf_act_row_bytes(type, K);
    for (int64_t m = 0; m < M; m++) quant(x + m * K, K, out + (size_t)m * rb);
}

struct quant_ctx {
    const struct sf_kernels *k;
    int type;
    const float *x;
    int64_t K;
    uint8_t *out;
};

static void quant_rows(const void *p, int64_t a, int64_t b) {
    const struct quant_ctx *c = p;
    quantize_acts(c->k, c->type, c->x + a * c->K, b - a, c->K, c->out + (size_t)a * sf_act_row_bytes(c->type, c->K));
}

int sf_quantize_acts(int type, const float *x, int64_t M, int64_t K, void *out) {
    if (!sf_type_supported(type)) return SF_EBADTYPE;
    if (!shape_ok(type, K) || M < 0) return SF_EBADSHAPE;
    if (M > 0 && (x == NULL || out == NULL)) return SF_ENULL;
    quantize_acts(sf_current_kernels(), type, x, M, K, out);
    return SF_OK;
}

/* ---- products ---- */

struct mm_ctx {
    sf_rows_fn fn;
    const uint8_t *w;
    size_t wrb, xrb;
    const uint8_t *xq;
    int64_t N, M, K;
    float *y;
    int64_t ldy;  /* y's row stride */
    int64_t chunk;  /* rows of W per call of fn: a multiple of SF_ROW_ALIGN */
    int listen;     /* the caller listens for stops: every thread checks between its chunks */
};

/* Share s's chunks not yet claimed, [front, back) as front << 32 | back, one cache line each
 * (set by the caller before the job starts; under the call lock). */
static struct {
    _Alignas(64) _Atomic uint64_t span;
} spans[SF_MAX_THREADS];

/* A chunk from the front (the owner) or the back (a thread done with its own) of a span; -1
 * where none is left. */
static int64_t claim(_Atomic uint64_t *span, int front) {
    uint64_t v = atomic_load_explicit(span, memory_order_relaxed);
    for (;;) {
        const uint32_t f = (uint32_t)(v >> 32), b = (uint32_t)v;
        if (f >= b) return -1;
        const uint64_t next = front ? v + ((uint64_t)1 << 32) : v - 1;
        if (atomic_compare_exchange_weak_explicit(span, &v, next, memory_order_relaxed, memory_order_relaxed))
            return front ? f : b - 1;
    }
}

/* Units [0, units) split into `shares` contiguous spans, one a share (before the job starts;
 * sf_run_job publishes them). */
static void start_spans(int64_t units, int shares) {
    for (int s = 0; s < shares; s++)
        atomic_store_explicit(&spans[s].span, (uint64_t)(units * s / shares) << 32 | (uint64_t)(units * (s + 1) / shares),
                              memory_order_relaxed);
}

/* Share s's next unit: from the front of its own span, then from the backs of the others',
 * *v walking s, s + 1, ... (start it at s); -1 when every span is empty. */
static int64_t next_unit(int s, int ns, int *v) {
    for (; *v < s + ns; (*v)++) {
        const int64_t k = claim(&spans[*v % ns].span, *v % ns == s);
        if (k >= 0) return k;
    }
    return -1;
}

/* Share s takes the chunks of its own slice of N from the front, then those the other shares
 * have not reached from their backs: on a 2-vCPU VM one thread is often late or slowed (the
 * Python thread, interrupts, a neighbour), and with fixed slices the other then idled at the
 * end of every product. perf of 8-row feeds of the target (AMD EPYC, Zen 4, 2 threads): the
 * pool's waiting (worker_main + sf_run_job) 9.1 % of the time with fixed slices, 5.3 % so.
 * Each thread still streams its own rows of W in order: with one shared counter instead, so
 * that the threads' chunks interleaved, feeds of the target were 3-7 % slower than fixed
 * slices (one interleaved in-process A/B); stealing, feeds take 0.92-1.00x the time of fixed
 * slices (noise ~3 %).
 * A stop lands within one chunk, not at the end of the product: a 16-row gate/up product of
 * the target takes ~1.3 ms on an AMD EPYC, a chunk ~20 us. Chunks split N only, and every
 * output value is computed by the same instructions whatever the split: no result changes. */
static void mm_share(const void *p, int s, int ns) {
    const struct mm_ctx *c = p;
    for (int v = s;;) {
        if (c->listen && atomic_load_explicit(&sf_stop_requested, memory_order_relaxed)) return;
        const int64_t k = next_unit(s, ns, &v);
        if (k < 0) return;
        const int64_t a = k * c->chunk, b = a + c->chunk < c->N ? a + c->chunk : c->N;
        c->fn(c->w + (size_t)a * c->wrb, c->wrb, b - a, c->xq, c->xrb, c->M, c->K, c->y + a, c->ldy);
    }
}

/* Rows of W a call of the rows kernel takes: about SF_CHUNK_BYTES of weights, and few enough
 * that each of `shares` threads gets SF_CHUNKS_PER_SHARE of them to balance with. */
static int64_t mm_chunk_rows(size_t wrb, int64_t N, int shares) {
    int64_t rows = (int64_t)(SF_CHUNK_BYTES / (wrb ? wrb : 1)) / SF_ROW_ALIGN * SF_ROW_ALIGN;
    const int64_t even = (N + shares * SF_CHUNKS_PER_SHARE - 1) / (shares * SF_CHUNKS_PER_SHARE);
    if (shares > 1 && even < rows) rows = (even + SF_ROW_ALIGN - 1) / SF_ROW_ALIGN * SF_ROW_ALIGN;
    return rows < SF_ROW_ALIGN ? SF_ROW_ALIGN : rows;
}

/* ---- the wide products (blocks.h sf_wide_block): products of many rows ---- */

static _Atomic int64_t wide_rows_from;       /* sf_set_wide_rows; 0: never */
static _Atomic int64_t wide_rows_from_q4_0;  /* sf_set_wide_rows_q4_0; 0: never */

void sf_set_wide_rows(int64_t m) { atomic_store(&wide_rows_from, m > 0 ? m : 0); }
int64_t sf_get_wide_rows(void) { return atomic_load(&wide_rows_from); }
void sf_set_wide_rows_q4_0(int64_t m) { atomic_store(&wide_rows_from_q4_0, m > 0 ? m : 0); }
int64_t sf_get_wide_rows_q4_0(void) { return atomic_load(&wide_rows_from_q4_0); }

int sf_variant_wide(int v) {
    const struct sf_kernels *k = sf_kernels_of(v);
    return k != NULL && k->wide_tile != NULL;
}

static struct {
    void *buf;
    size_t cap;
} wide_tiles[SF_MAX_THREADS];     /* each share's tile, under the call lock */
static void *xsums;               /* sums of the activation blocks, under the call lock */
static size_t xsums_cap;

struct wide_ctx {
    const struct sf_kernels *k;
    int type;
    const uint8_t *w;
    size_t wrb, xrb;
    const uint8_t *xq;
    const int32_t *xsum;
    int64_t N, M, nb;
    float *y;
    int64_t ldy;
    int listen;
};

/* Share s takes its own slice of the tiles from the front, then the others' from their backs
 * (as mm_share); each tile is made once into the share's buffer and met by every row. */
static void wide_share(const void *p, int s, int ns) {
    const struct wide_ctx *c = p;
    sf_wide_block *tile = wide_tiles[s].buf;
    for (int v = s;;) {
        if (c->listen && atomic_load_explicit(&sf_stop_requested, memory_order_relaxed)) return;
        const int64_t t = next_unit(s, ns, &v);
        if (t < 0) return;
        const int64_t r = t * SF_WIDE_ROWS;
        if (c->type == SF_Q4_0_X8) {
            sf_wide_block_32 *t32 = wide_tiles[s].buf;
            c->k->wide32_tile(c->w + (size_t)r * c->wrb, c->wrb, c->nb, t32);
            c->k->wide32_rows(t32, c->nb, c->xq, c->xrb, c->xsum, c->M, c->y + r, c->ldy);
            continue;
        }
        c->k->wide_tile(c->type, c->w + (size_t)r * c->wrb, c->wrb, c->nb, tile);
        c->k->wide_rows(tile, c->nb, c->xq, c->xrb, c->xsum, c->M, c->y + r, c->ldy);
    }
}

static int wide_fits(const struct sf_kernels *k, int type, int64_t N, int64_t M) {
    const int q4_0 = type == SF_Q4_0_X8;
    const int64_t from = atomic_load_explicit(q4_0 ? &wide_rows_from_q4_0 : &wide_rows_from, memory_order_relaxed);
    const int has = q4_0 ? k->wide32_tile != NULL : (type == SF_Q4_K_X8 || type == SF_Q6_K_X8) && k->wide_tile != NULL;
    return from > 0 && M >= from && has && N % SF_WIDE_ROWS == 0;
}

/* xq holds the rows' activation blocks already. */
static int wide_matmul(const struct sf_kernels *k, int type, const void *w, int64_t N, int64_t K, const uint8_t *xq,
                       size_t xrb, int64_t M, float *y, int64_t ldy, int listen) {
    const int q4_0 = type == SF_Q4_0_X8;
    const int64_t nb = K / (q4_0 ? SF_QK32 : SF_QKK), tiles = N / SF_WIDE_ROWS;
    int32_t *xsum = sf_scratch_grow(&xsums, &xsums_cap, (size_t)(M * nb) * sizeof(int32_t));
    if (xsum == NULL) return SF_ENOMEM;
    for (int64_t m = 0; m < M; m++)
        for (int64_t i = 0; i < nb; i++) {
            int32_t t = 0;
            if (q4_0) {  /* the offset of the -8: -8 * the block's sum */
                const sf_act_32 *x = (const sf_act_32 *)(xq + (size_t)m * xrb) + i;
                for (int j = 0; j < SF_QK32; j++) t += x->qs[j];
                t *= -8;
            } else {
                const sf_act_k *x = (const sf_act_k *)(xq + (size_t)m * xrb) + i;
                for (int j = 0; j < 16; j++) t += x->bsums[j];
            }
            xsum[m * nb + i] = t;
        }
    const int shares = sf_job_shares(N * K / SF_MIN_SHARE_VALUES, tiles);
    const size_t tile_bytes = (size_t)nb * (q4_0 ? sizeof(sf_wide_block_32) : sizeof(sf_wide_block));
    for (int s = 0; s < shares; s++)
        if (sf_scratch_grow(&wide_tiles[s].buf, &wide_tiles[s].cap, tile_bytes) == NULL) return SF_ENOMEM;
    start_spans(tiles, shares);
    const struct wide_ctx c = {k, type, w, sf_row_bytes(type, K), xrb, xq, xsum, N, M, nb, y, ldy, listen};
    const struct sf_job j = {wide_share, &c, shares};
    sf_run_job(&j);
    return listen && atomic_load(&sf_stop_requested) ? SF_ESTOPPED : SF_OK;
}

int sf_matmul_shape_ok(int type, int64_t N, int64_t K, int64_t M) {
    return shape_ok(type, K) && N >= 0 && M >= 0 && !(is_x8(type) && N % 8 != 0);
}

int sf_matmul_locked(const struct sf_kernels *k, int type, const void *w, int64_t N, int64_t K,
                     const float *x, int64_t M, float *y, int64_t ldy, int listen) {
    if (N == 0 || M == 0) return SF_OK;
    const size_t xrb = sf_act_row_bytes(type, K);
    uint8_t *xq = sf_scratch_grow(&scratch, &scratch_cap, (size_t)M * xrb);
    if (xq == NULL) return SF_ENOMEM;
    const struct quant_ctx qc = {k, type, x, K, xq};
    sf_run_rows(quant_rows, &qc, M, K);  /* rows quantized alone: the split changes no bit */
    if (wide_fits(k, type, N, M)) return wide_matmul(k, type, w, N, K, xq, xrb, M, y, ldy, listen);

    const size_t wrb = sf_row_bytes(type, K);
    const int shares = sf_job_shares(N * K / SF_MIN_SHARE_VALUES, (N + SF_ROW_ALIGN - 1) / SF_ROW_ALIGN);
    const struct mm_ctx c = {rows_fn(k, type), w, wrb, xrb, xq, N, M, K, y, ldy, mm_chunk_rows(wrb, N, shares), listen};
    start_spans((N + c.chunk - 1) / c.chunk, shares);
    const struct sf_job j = {mm_share, &c, shares};
    sf_run_job(&j);
    /* the flag is sticky until sf_clear_stop: set now if any share stopped early */
    return listen && atomic_load(&sf_stop_requested) ? SF_ESTOPPED : SF_OK;
}

int sf_matmul(int type, const void *w, int64_t N, int64_t K, const float *x, int64_t M, float *y) {
    if (!sf_type_supported(type)) return SF_EBADTYPE;
    if (!sf_matmul_shape_ok(type, N, K, M)) return SF_EBADSHAPE;
    if (N == 0 || M == 0) return SF_OK;
    if (w == NULL || x == NULL || y == NULL) return SF_ENULL;
    const struct sf_kernels *k = sf_current_kernels();
    sf_lock_call();
    const int rc = sf_matmul_locked(k, type, w, N, K, x, M, y, N, 0);
    sf_unlock_call();
    return rc;
}

int sf_repack(int type, const void *w, int64_t N, int64_t K, void *out) {
    if (type != SF_Q8_0 && type != SF_Q5_0 && type != SF_Q4_0 && type != SF_Q4_K && type != SF_Q6_K)
        return SF_EBADTYPE;
    if (!shape_ok(type, K) || N < 0 || N % 8 != 0) return SF_EBADSHAPE;
    if (N > 0 && (w == NULL || out == NULL)) return SF_ENULL;
    const int64_t nb = K / block_values(type);
    for (int64_t r = 0; r < N; r += 8) {
        const int64_t g = r / 8 * nb;  /* the group's first x8 block */
        switch (type) {
        case SF_Q8_0: sf_repack_q8_0_x8((const sf_block_q8_0 *)w + r * nb, nb, (sf_block_q8_0_x8 *)out + g); break;
        case SF_Q5_0: sf_repack_q5_0_x8((const sf_block_q5_0 *)w + r * nb, nb, (sf_block_q5_0_x8 *)out + g); break;
        case SF_Q4_0: sf_repack_q4_0_x8((const sf_block_q4_0 *)w + r * nb, nb, (sf_block_q4_0_x8 *)out + g); break;
        case SF_Q4_K: sf_repack_q4_K_x8((const sf_block_q4_K *)w + r * nb, nb, (sf_block_q4_K_x8 *)out + g); break;
        default: sf_repack_q6_K_x8((const sf_block_q6_K *)w + r * nb, nb, (sf_block_q6_K_x8 *)out + g); break;
        }
    }
    return type + 100;  /* SF_*_X8 */
}

int sf_dequantize_rows(int type, const void *w, int64_t rows, int64_t K, float *out) {
    if (!sf_type_supported(type) || is_x8(type)) return SF_EBADTYPE;
    if (!shape_ok(type, K) || rows < 0) return SF_EBADSHAPE;
    if (rows > 0 && (w == NULL || out == NULL)) return SF_ENULL;
    const size_t rb = sf_row_bytes(type, K);
    for (int64_t r = 0; r < rows; r++) sf_ref_dequantize_row(type, (const uint8_t *)w + (size_t)r * rb, K, out + r * K);
    return SF_OK;
}

struct rq_ctx {
    int type;
    const uint8_t *w;
    uint8_t *out;
    size_t rb, ob;
    int64_t rows, K;
    atomic_int failed;
};

static void rq_share(const void *p, int s, int ns) {
    struct rq_ctx *c = (struct rq_ctx *)p;
    float *row = malloc((size_t)c->K * sizeof(float));
    if (row == NULL) {
        atomic_store(&c->failed, 1);
        return;
    }
    for (int64_t r = c->rows * s / ns; r < c->rows * (s + 1) / ns; r++) {
        sf_ref_dequantize_row(c->type, c->w + (size_t)r * c->rb, c->K, row);
        sf_ref_quantize_row_q4_0(row, c->K, (sf_block_q4_0 *)(c->out + (size_t)r * c->ob));
    }
    free(row);
}

int sf_requantize_rows(int type, const void *w, int64_t rows, int64_t K, int to_type, void *out) {
    if (to_type != SF_Q4_0 || !sf_type_supported(type) || is_x8(type)) return SF_EBADTYPE;
    const size_t rb = sf_row_bytes(type, K), ob = sf_row_bytes(to_type, K);
    if (rb == 0 || ob == 0 || rows < 0) return SF_EBADSHAPE;
    if (rows == 0) return SF_OK;
    if (w == NULL || out == NULL) return SF_ENULL;
    struct rq_ctx c = {type, w, out, rb, ob, rows, K, 0};
    sf_lock_call();
    const struct sf_job j = {rq_share, &c, sf_job_shares(rows * K / SF_MIN_SHARE_VALUES, rows)};  /* rows are their own */
    sf_run_job(&j);
    sf_unlock_call();
    return atomic_load(&c.failed) ? SF_ENOMEM : SF_OK;
}
