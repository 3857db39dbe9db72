/* What the library's own files share, none of it part of the C API (specfill_kernels.h):
 * variants.c picks the variant, pool.c owns the call lock, the thread pool and the scratch
 * buffers, matmul.c the products, layer.c a decoder layer's steps. */
#ifndef SF_INTERNAL_H
#define SF_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "blocks.h"

/* ---- variants.c ---- */

/* The kernels of the variant in use (SPECFILL_KERNEL at the first call, then sf_set_variant). */
const struct sf_kernels *sf_current_kernels(void);
/* Variant v's kernels where this CPU runs them, else NULL. */
const struct sf_kernels *sf_kernels_of(int v);

/* ---- pool.c: one call at a time, split into shares over the pool's threads ---- */

#define SF_MIN_SHARE_VALUES (1 << 18)  /* weights per thread below which fewer threads run */
#define SF_MAX_THREADS 256            /* the most shares a job has */

/* Share 0 runs on the caller, share i on worker i; fn is called once per share. */
struct sf_job {
    void (*fn)(const void *ctx, int share, int nshares);
    const void *ctx;
    int nshares;
};

void sf_lock_call(void);    /* the one-call-at-a-time lock; the pool is set up at the first */
void sf_unlock_call(void);
/* The shares a job runs in (under the call lock): `wanted` by its work, at most one a thread
 * and one a unit it cannot split; the pool is made ready for them. */
int sf_job_shares(int64_t wanted, int64_t units);
void sf_run_job(const struct sf_job *job);  /* under the call lock */
/* fn(ctx, a, b) for rows [a, b) of M, each row `per_row` values of work, split over the pool
 * where there are at least SF_ROWS_SHARE_VALUES values a thread (a prefill's activation
 * quantization and SiLU, ~2 and ~5 ms a layer of 256 rows on the caller alone); for steps
 * whose rows are their own, so the split changes no bit. Under the call lock. */
#define SF_ROWS_SHARE_VALUES (1 << 16)
void sf_run_rows(void (*fn)(const void *ctx, int64_t a, int64_t b), const void *ctx, int64_t M, int64_t per_row);
/* A buffer of at least `bytes`, grown (never shrunk) and kept across calls, under the call
 * lock; NULL if it cannot grow (the old buffer is kept). */
void *sf_scratch_grow(void **buf, size_t *cap, size_t bytes);

/* ---- matmul.c ---- */

int sf_matmul_shape_ok(int type, int64_t N, int64_t K, int64_t M);
/* y [M, N] (rows ldy apart) = x . W^T, checked by the caller; under the call lock. `listen`:
 * a stop request ends it part-way (SF_ESTOPPED; y is then partly written). */
int sf_matmul_locked(const struct sf_kernels *k, int type, const void *w, int64_t N, int64_t K, const float *x,
                     int64_t M, float *y, int64_t ldy, int listen);

/* ---- layer.c: sf_request_stop's flag, read inside the products too ---- */

extern atomic_int sf_stop_requested;

#endif /* SF_INTERNAL_H */
