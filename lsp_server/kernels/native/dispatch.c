/* The variant table, the thread pool and the public entry points of specfill_kernels.h.
 * Adding an ISA = one file that defines a `struct sf_kernels` (see blocks.h), one entry in
 * `variants` below and its CPU test in `cpu_runs`. */
#define _GNU_SOURCE
#include "blocks.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "specfill_kernels.h"

/* ---- variants ---- */

static const struct sf_kernels *const variants[SF_NVARIANTS] = {
    [SF_SCALAR] = &sf_kernels_scalar,
#if defined(__x86_64__)
    [SF_AVX2] = &sf_kernels_avx2,
    [SF_AVX512] = &sf_kernels_avx512,
#endif
#if defined(__aarch64__)
    [SF_NEON] = &sf_kernels_neon,
#endif
};

static const char *const variant_names[SF_NVARIANTS] = {"scalar", "avx2", "avx512", "neon"};

/* What the CPU (and the OS, for the vector state) can run; the compiler's cpu model checks
 * XCR0 too. Kept out of the ISA files, which are compiled for their ISA. */
static int cpu_runs(int v) {
    switch (v) {
    case SF_SCALAR:
        return 1;
#if defined(__x86_64__)
    case SF_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case SF_AVX512:
        __builtin_cpu_init();
        return cpu_runs(SF_AVX2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#endif
#if defined(__aarch64__)
    case SF_NEON:  /* Advanced SIMD is part of AArch64; the dot-product extension is not */
        return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
    default:
        return 0;
    }
}

int sf_variant_supported(int v) {
    return v >= 0 && v < SF_NVARIANTS && variants[v] != NULL && cpu_runs(v);
}

int sf_variant_best(void) {
    static const int order[] = {SF_AVX512, SF_AVX2, SF_NEON};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (sf_variant_supported(order[i])) return order[i];
    return SF_SCALAR;
}

const char *sf_variant_name(int v) { return v >= 0 && v < SF_NVARIANTS ? variant_names[v] : NULL; }

/* ---- library state ---- */

#define SF_MAX_THREADS 256
#define SF_ROW_ALIGN 16           /* rows per unit of the N split: y stays in whole cache lines */
#define SF_MIN_SHARE_VALUES (1 << 18)  /* weights per thread below which fewer threads run */
#define SF_CHUNK_BYTES (128 * 1024)  /* weight bytes per call of a rows kernel within a share */
/* How long an idle worker spins before it sleeps: 50 us by default, so that idle workers
 * soon leave the cores to torch's own threads. sf_set_spin_us lengthens it where torch runs
 * on one thread beside the pool (local_runtime.apply_threads): then, between two products
 * of a forward pass, torch runs the norms and the attention for ~0.1-1 ms, and a worker that
 * slept through that gap pays a futex wake-up at the next product, 141 times a target step.
 * One-off probe (AMD EPYC, avx512_vnni, 2 cores, native target alone, 12 HumanEval decodes
 * alternating the two settings in one process): median 76 ms a token spinning 50 us, 68 ms
 * spinning 2 ms. */
static _Atomic int64_t spin_ns = 50000;
#define SF_YIELD_NS 200000        /* how long the caller spins on busy workers before yielding */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static atomic_int current_variant;
static int default_threads = 1;
static int want_threads = 1;      /* under call_mu */
static pthread_mutex_t call_mu = PTHREAD_MUTEX_INITIALIZER;  /* one call at a time */
static void *scratch;             /* quantized activations, reused across calls; under call_mu */
static size_t scratch_cap;
static void *attn_scratch;        /* attention scores, one row of them per share; under call_mu */
static size_t attn_scratch_cap;

static int affinity_cpus(void) {
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void pool_after_fork_child(void);
static void lock_for_fork(void) { pthread_mutex_lock(&call_mu); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&call_mu); }
static void child_after_fork(void) {
    pool_after_fork_child();
    pthread_mutex_unlock(&call_mu);
}

static void init_once_fn(void) {
    int v = sf_variant_best();
    const char *env = getenv("SPECFILL_KERNEL");
    if (env != NULL)
        for (int i = 0; i < SF_NVARIANTS; i++)
            if (strcasecmp(env, variant_names[i]) == 0 && sf_variant_supported(i)) v = i;
    atomic_store(&current_variant, v);
    default_threads = affinity_cpus();
    if (default_threads > SF_MAX_THREADS) default_threads = SF_MAX_THREADS;
    want_threads = default_threads;
    pthread_atfork(lock_for_fork, unlock_after_fork, child_after_fork);
}

static void ensure_init(void) { pthread_once(&init_once, init_once_fn); }

int sf_set_variant(int v) {
    ensure_init();
    if (!sf_variant_supported(v)) return -1;
    atomic_store(&current_variant, v);
    return 0;
}

int sf_get_variant(void) {
    ensure_init();
    return atomic_load(&current_variant);
}

/* ---- the thread pool: share 0 runs on the caller, share i on worker i ---- */

struct job {
    void (*fn)(const void *ctx, int share, int nshares);
    const void *ctx;
    int nshares;
};

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;        /* bumped once per job (and to stop) */
    atomic_int pending;     /* workers not yet done with the current job */
    atomic_int sleepers;    /* workers waiting on cv */
    atomic_int quit;
    const struct job *job;  /* written before gen is bumped */
    unsigned start_gen;     /* gen when the workers were made */
    int nworkers;
    pthread_t tids[SF_MAX_THREADS];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Spin for up to spin_ns (back-to-back calls of one forward pass pay no wake-up), then
 * sleep, so that idle workers leave the cores to the rest of the process. */
static unsigned wait_new_gen(unsigned seen) {
    unsigned g;
    const int64_t deadline = now_ns() + atomic_load_explicit(&spin_ns, memory_order_relaxed);
    for (unsigned k = 1;; k++) {
        g = atomic_load_explicit(&pool.gen, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if (k % 64 == 0 && now_ns() > deadline) break;
    }
    pthread_mutex_lock(&pool.mu);
    atomic_fetch_add(&pool.sleepers, 1);  /* seq_cst: pairs with run_job's gen bump */
    while ((g = atomic_load(&pool.gen)) == seen) pthread_cond_wait(&pool.cv, &pool.mu);
    atomic_fetch_sub(&pool.sleepers, 1);
    pthread_mutex_unlock(&pool.mu);
    return g;
}

static void *worker_main(void *arg) {
    const int share = (int)(intptr_t)arg;
    unsigned seen = pool.start_gen;
    for (;;) {
        seen = wait_new_gen(seen);
        if (atomic_load(&pool.quit)) break;
        const struct job *j = pool.job;
        if (share < j->nshares) j->fn(j->ctx, share, j->nshares);
        atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_release);
    }
    return NULL;
}

static void pool_stop(void) {
    if (pool.nworkers == 0) return;
    atomic_store(&pool.quit, 1);
    pthread_mutex_lock(&pool.mu);
    atomic_fetch_add(&pool.gen, 1);
    pthread_cond_broadcast(&pool.cv);
    pthread_mutex_unlock(&pool.mu);
    for (int i = 0; i < pool.nworkers; i++) pthread_join(pool.tids[i], NULL);
    pool.nworkers = 0;
    atomic_store(&pool.quit, 0);
}

/* Make threads - 1 workers if the pool has another size (under call_mu). */
static void pool_ensure(int threads) {
    if (pool.nworkers == threads - 1) return;
    pool_stop();
    pool.start_gen = atomic_load(&pool.gen);
    int made = 0;
    for (int i = 0; i < threads - 1; i++) {
        if (pthread_create(&pool.tids[i], NULL, worker_main, (void *)(intptr_t)(i + 1)) != 0) break;
        made++;
    }
    pool.nworkers = made;
}

/* The forked child has no workers: forget them (the parent's stay the parent's). */
static void pool_after_fork_child(void) {
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    atomic_store(&pool.pending, 0);
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.quit, 0);
    pool.nworkers = 0;
}

static void run_job(const struct job *j) {
    if (j->nshares > 1 && pool.nworkers > 0) {
        pool.job = j;
        atomic_store_explicit(&pool.pending, pool.nworkers, memory_order_relaxed);
        atomic_fetch_add(&pool.gen, 1);  /* seq_cst: publishes job and pending */
        if (atomic_load(&pool.sleepers) > 0) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_broadcast(&pool.cv);
            pthread_mutex_unlock(&pool.mu);
        }
    }
    j->fn(j->ctx, 0, j->nshares);
    if (j->nshares > 1 && pool.nworkers > 0) {
        const int64_t yield_after = now_ns() + SF_YIELD_NS;
        for (unsigned k = 1; atomic_load_explicit(&pool.pending, memory_order_acquire) > 0; k++) {
            cpu_relax();
            if (k % 64 == 0 && now_ns() > yield_after) sched_yield();
        }
    }
}

void sf_set_threads(int n) {
    ensure_init();
    pthread_mutex_lock(&call_mu);
    want_threads = n <= 0 ? default_threads : (n > SF_MAX_THREADS ? SF_MAX_THREADS : n);
    if (pool.nworkers != want_threads - 1) pool_stop();  /* remade at the next call */
    pthread_mutex_unlock(&call_mu);
}

void sf_set_spin_us(int us) {
    atomic_store_explicit(&spin_ns, (int64_t)(us < 0 ? 0 : us) * 1000, memory_order_relaxed);
}

int sf_get_threads(void) {
    ensure_init();
    pthread_mutex_lock(&call_mu);
    const int n = want_threads;
    pthread_mutex_unlock(&call_mu);
    return n;
}

/* ---- types ---- */

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

int sf_quantize_acts(int type, const float *x, int64_t M, int64_t K, void *out) {
    if (!sf_type_supported(type)) return SF_EBADTYPE;
    if (!shape_ok(type, K) || M < 0) return SF_EBADSHAPE;
    if (M > 0 && (x == NULL || out == NULL)) return SF_ENULL;
    quantize_acts(variants[sf_get_variant()], type, x, M, K, out);
    return SF_OK;
}

/* ---- matmul ---- */

static atomic_int stop_requested;  /* sf_request_stop; read between a layer step's products and inside them */
static _Thread_local int listening;  /* sf_listen_for_stop: this thread's steps honour it */

struct mm_ctx {
    sf_rows_fn fn;
    const uint8_t *w;
    size_t wrb, xrb;
    const uint8_t *xq;
    int64_t N, M, K, units;
    float *y;
    int64_t ldy;  /* y's row stride */
    int64_t chunk;  /* rows of W per call of fn: a multiple of SF_ROW_ALIGN */
    int listen;     /* the caller listens for stops: every share checks between its chunks */
};

/* A share goes over its rows of W in chunks of about SF_CHUNK_BYTES, so that a stop lands
 * within one chunk, not at the end of the product: a 16-row gate/up product of the target
 * takes ~1.3 ms on an AMD EPYC, a chunk ~20 us. Chunks split N only, and every output value
 * is computed by the same instructions whatever the split: no result changes. */
static void mm_share(const void *p, int s, int ns) {
    const struct mm_ctx *c = p;
    const int64_t n0 = c->units * s / ns * SF_ROW_ALIGN;
    int64_t n1 = c->units * (s + 1) / ns * SF_ROW_ALIGN;
    if (n1 > c->N) n1 = c->N;
    for (int64_t a = n0; a < n1; a += c->chunk) {
        if (c->listen && atomic_load_explicit(&stop_requested, memory_order_relaxed)) return;
        const int64_t b = a + c->chunk < n1 ? a + c->chunk : n1;
        c->fn(c->w + (size_t)a * c->wrb, c->wrb, b - a, c->xq, c->xrb, c->M, c->K, c->y + a, c->ldy);
    }
}

static int64_t mm_chunk_rows(size_t wrb) {
    int64_t rows = (int64_t)(SF_CHUNK_BYTES / (wrb ? wrb : 1)) / SF_ROW_ALIGN * SF_ROW_ALIGN;
    return rows < SF_ROW_ALIGN ? SF_ROW_ALIGN : rows;
}

/* The shares a job runs in: `wanted` by its work, at most one a thread and one a unit it
 * cannot split (the split never changes a result); the pool is made ready for them. Under
 * call_mu. */
static int job_shares(int64_t wanted, int64_t units) {
    if (wanted > want_threads) wanted = want_threads;
    if (wanted > units) wanted = units;
    if (wanted < 1) wanted = 1;
    if (wanted > 1) pool_ensure(want_threads);
    return (int)wanted;
}

/* A buffer of at least `bytes`, grown (never shrunk) and kept across calls; under call_mu.
 * NULL if it cannot grow (the old buffer is kept). */
static void *scratch_grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return *buf;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    free(*buf);
    *buf = p;
    *cap = bytes;
    return p;
}

static int matmul_shape_ok(int type, int64_t N, int64_t K, int64_t M) {
    return shape_ok(type, K) && N >= 0 && M >= 0 && !(is_x8(type) && N % 8 != 0);
}

/* y [M, N] (rows ldy apart) = x . W^T, checked by the caller; under call_mu. `listen`: a
 * stop request ends it part-way (SF_ESTOPPED; y is then partly written). */
static int matmul_locked(const struct sf_kernels *k, int type, const void *w, int64_t N, int64_t K,
                         const float *x, int64_t M, float *y, int64_t ldy, int listen) {
    if (N == 0 || M == 0) return SF_OK;
    const size_t xrb = sf_act_row_bytes(type, K);
    uint8_t *xq = scratch_grow(&scratch, &scratch_cap, (size_t)M * xrb);
    if (xq == NULL) return SF_ENOMEM;
    quantize_acts(k, type, x, M, K, xq);

    const size_t wrb = sf_row_bytes(type, K);
    const struct mm_ctx c = {rows_fn(k, type), w, wrb, xrb, xq, N, M, K, (N + SF_ROW_ALIGN - 1) / SF_ROW_ALIGN,
                             y, ldy, mm_chunk_rows(wrb), listen};
    const struct job j = {mm_share, &c, job_shares(N * K / SF_MIN_SHARE_VALUES, c.units)};
    run_job(&j);
    /* the flag is sticky until sf_clear_stop: set now if any share stopped early */
    return listen && atomic_load(&stop_requested) ? SF_ESTOPPED : SF_OK;
}

int sf_matmul(int type, const void *w, int64_t N, int64_t K, const float *x, int64_t M, float *y) {
    if (!sf_type_supported(type)) return SF_EBADTYPE;
    if (!matmul_shape_ok(type, N, K, M)) return SF_EBADSHAPE;
    if (N == 0 || M == 0) return SF_OK;
    if (w == NULL || x == NULL || y == NULL) return SF_ENULL;
    ensure_init();
    const struct sf_kernels *k = variants[atomic_load(&current_variant)];
    pthread_mutex_lock(&call_mu);
    const int rc = matmul_locked(k, type, w, N, K, x, M, y, N, 0);
    pthread_mutex_unlock(&call_mu);
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
    ensure_init();
    struct rq_ctx c = {type, w, out, rb, ob, rows, K, 0};
    pthread_mutex_lock(&call_mu);
    const struct job j = {rq_share, &c, job_shares(rows * K / SF_MIN_SHARE_VALUES, rows)};  /* rows are their own */
    run_job(&j);
    pthread_mutex_unlock(&call_mu);
    return atomic_load(&c.failed) ? SF_ENOMEM : SF_OK;
}

/* ---- the float steps around the products ---- */

static const struct sf_kernels *current_kernels(void) {
    ensure_init();
    return variants[atomic_load(&current_variant)];
}

int sf_rmsnorm(const float *x, const float *w, int64_t M, int64_t K, float eps, float *out) {
    if (M < 0 || K <= 0 || K % SF_LANES != 0) return SF_EBADSHAPE;
    if (M == 0) return SF_OK;
    if (x == NULL || w == NULL || out == NULL) return SF_ENULL;
    current_kernels()->rmsnorm(x, w, M, K, eps, out);
    return SF_OK;
}

int sf_silu_mul(const float *gate_up, int64_t M, int64_t F, float *out) {
    if (M < 0 || F <= 0) return SF_EBADSHAPE;
    if (M == 0) return SF_OK;
    if (gate_up == NULL || out == NULL) return SF_ENULL;
    current_kernels()->silu_mul(gate_up, M, F, out);
    return SF_OK;
}

struct attn_ctx {
    const struct sf_kernels *k;
    const float *q, *k_cache, *v_cache;
    int64_t q_stride, M, H, group, D, cap, past, span;
    float scale;
    float *out;
};

/* Share s of ns takes a contiguous run of the M * H (row, head) units, so the heads that
 * read one key-value head mostly stay on one core. */
static void attn_share(const void *p, int s, int ns) {
    const struct attn_ctx *c = p;
    const int64_t units = c->M * c->H, u0 = units * s / ns, u1 = units * (s + 1) / ns;
    float *scores = (float *)attn_scratch + (size_t)s * (size_t)c->span;
    for (int64_t u = u0; u < u1; u++) {
        const int64_t j = u / c->H, h = u % c->H, g = h / c->group;
        const size_t kv = (size_t)g * (size_t)c->cap * (size_t)c->D;
        c->k->attend(c->q + j * c->q_stride + h * c->D, c->k_cache + kv, c->v_cache + kv, c->past + j + 1, c->D,
                     c->scale, scores, c->out + (j * c->H + h) * c->D);
    }
}

static int attention_shape_ok(int64_t q_stride, int64_t kv_stride, int64_t M, int64_t H, int64_t KV, int64_t D,
                              int64_t cap, int64_t past) {
    return M >= 0 && H > 0 && KV > 0 && H % KV == 0 && D > 0 && D % SF_LANES == 0 && D <= 512 && past >= 0 &&
           past + M <= cap && q_stride >= H * D && kv_stride >= KV * D;
}

/* sf_attention, checked by the caller; under call_mu. */
static int attention_locked(const struct sf_kernels *kern, float *q, int64_t q_stride, float *k, const float *v,
                            int64_t kv_stride, int64_t M, int64_t H, int64_t KV, int64_t D, const float *cos,
                            const float *sin, float *k_cache, float *v_cache, int64_t cap, int64_t past, float scale,
                            float *out) {
    for (int64_t j = 0; j < M; j++) {
        kern->rope(q + j * q_stride, H, D, cos + j * D, sin + j * D);
        kern->rope(k + j * kv_stride, KV, D, cos + j * D, sin + j * D);
        for (int64_t g = 0; g < KV; g++) {
            const size_t at = ((size_t)g * (size_t)cap + (size_t)(past + j)) * (size_t)D;
            memcpy(k_cache + at, k + j * kv_stride + g * D, (size_t)D * sizeof(float));
            memcpy(v_cache + at, v + j * kv_stride + g * D, (size_t)D * sizeof(float));
        }
    }
    /* a share: 32k multiply-adds at least */
    const int shares = job_shares(M * H * (past + M) * D * 8 / SF_MIN_SHARE_VALUES, M * H);
    if (scratch_grow(&attn_scratch, &attn_scratch_cap, (size_t)shares * (size_t)(past + M) * sizeof(float)) == NULL)
        return SF_ENOMEM;
    const struct attn_ctx c = {kern, q, k_cache, v_cache, q_stride, M, H, H / KV, D, cap, past, past + M, scale, out};
    const struct job jb = {attn_share, &c, shares};
    run_job(&jb);
    return SF_OK;
}

int sf_attention(float *q, int64_t q_stride, float *k, const float *v, int64_t kv_stride, int64_t M, int64_t H,
                 int64_t KV, int64_t D, const float *cos, const float *sin, float *k_cache, float *v_cache,
                 int64_t cap, int64_t past, float scale, float *out) {
    if (!attention_shape_ok(q_stride, kv_stride, M, H, KV, D, cap, past)) return SF_EBADSHAPE;
    if (M == 0) return SF_OK;
    if (q == NULL || k == NULL || v == NULL || cos == NULL || sin == NULL || k_cache == NULL || v_cache == NULL ||
        out == NULL)
        return SF_ENULL;
    const struct sf_kernels *kern = current_kernels();
    pthread_mutex_lock(&call_mu);
    const int rc = attention_locked(kern, q, q_stride, k, v, kv_stride, M, H, KV, D, cos, sin, k_cache, v_cache,
                                    cap, past, scale, out);
    pthread_mutex_unlock(&call_mu);
    return rc;
}

/* ---- a whole decoder layer ---- */

void sf_request_stop(void) { atomic_store(&stop_requested, 1); }
void sf_clear_stop(void) { atomic_store(&stop_requested, 0); }
void sf_listen_for_stop(int on) { listening = on != 0; }

static int stopping(void) { return listening && atomic_load_explicit(&stop_requested, memory_order_relaxed); }

static void *layer_scratch;       /* the layer's rows between its steps; under call_mu */
static size_t layer_scratch_cap;

/* y [M, N] (rows ldy apart) += b [N]; b NULL: nothing. */
static void add_bias(float *y, int64_t M, int64_t N, int64_t ldy, const float *b) {
    if (b == NULL) return;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) y[m * ldy + n] += b[n];
}

/* The matrices of `parts` side by side: y [M, sum N] (rows ldy apart) = x . [W0 | W1 ..]^T. */
static int parts_locked(const struct sf_kernels *k, const struct sf_matrix *parts, int n, int64_t K,
                        const float *x, int64_t M, float *y, int64_t ldy) {
    int64_t col = 0;
    for (int i = 0; i < n; i++) {
        const int rc = matmul_locked(k, parts[i].type, parts[i].w, parts[i].N, K, x, M, y + col, ldy, listening);
        if (rc != SF_OK) return rc;
        col += parts[i].N;
    }
    return SF_OK;
}

static int64_t parts_width(const struct sf_matrix *parts, int n) {
    int64_t width = 0;
    for (int i = 0; i < n; i++) width += parts[i].N;
    return width;
}

static int parts_ok(const struct sf_matrix *parts, int n, int64_t K, int64_t M) {
    if (n < 1 || n > 3) return SF_EBADSHAPE;
    for (int i = 0; i < n; i++) {
        if (!sf_type_supported(parts[i].type)) return SF_EBADTYPE;
        if (!matmul_shape_ok(parts[i].type, parts[i].N, K, M) || parts[i].N == 0) return SF_EBADSHAPE;
        if (parts[i].w == NULL) return SF_ENULL;
    }
    return SF_OK;
}

static int layer_ok(const struct sf_layer *L, int64_t M, int64_t cap, int64_t past) {
    const int64_t H = L->heads, KV = L->kv_heads, D = L->head_dim, width = L->hidden;
    if (width <= 0 || width % SF_LANES != 0 || L->ffn <= 0 || M < 0) return SF_EBADSHAPE;
    if (L->attn_norm == NULL || L->ffn_norm == NULL) return SF_ENULL;
    int rc;
    if ((rc = parts_ok(L->qkv, L->n_qkv, width, M)) != SF_OK || (rc = parts_ok(&L->o, 1, H * D, M)) != SF_OK ||
        (rc = parts_ok(L->gate_up, L->n_gate_up, width, M)) != SF_OK || (rc = parts_ok(&L->down, 1, L->ffn, M)) != SF_OK)
        return rc;
    const int64_t qkv = (H + 2 * KV) * D;
    if (parts_width(L->qkv, L->n_qkv) != qkv || L->o.N != width || parts_width(L->gate_up, L->n_gate_up) != 2 * L->ffn ||
        L->down.N != width || !attention_shape_ok(qkv, qkv, M, H, KV, D, cap, past))
        return SF_EBADSHAPE;
    return SF_OK;
}

int sf_layer_step(const struct sf_layer *L, float *x, int64_t M, const float *cos, const float *sin,
                  float *k_cache, float *v_cache, int64_t cap, int64_t past) {
    if (L == NULL) return SF_ENULL;
    int rc = layer_ok(L, M, cap, past);
    if (rc != SF_OK || M == 0) return rc;
    if (x == NULL || cos == NULL || sin == NULL || k_cache == NULL || v_cache == NULL) return SF_ENULL;
    if (stopping()) return SF_ESTOPPED;
    const struct sf_kernels *k = current_kernels();
    const int64_t width = L->hidden, H = L->heads, KV = L->kv_heads, D = L->head_dim, F = L->ffn;
    const int64_t qkv_w = (H + 2 * KV) * D;
    const size_t floats = (size_t)M * (size_t)(2 * width + qkv_w + H * D + 3 * F);

    pthread_mutex_lock(&call_mu);
    float *h = scratch_grow(&layer_scratch, &layer_scratch_cap, floats * sizeof(float));
    if (h == NULL) {
        pthread_mutex_unlock(&call_mu);
        return SF_ENOMEM;
    }
    float *t = h + M * width, *qkv = t + M * width, *att = qkv + M * qkv_w, *gate_up = att + M * H * D,
          *act = gate_up + M * 2 * F;
    /* the same steps, in the same order, as native_layers' torch composition of the calls above */
    k->rmsnorm(x, L->attn_norm, M, width, L->eps, h);
    if ((rc = parts_locked(k, L->qkv, L->n_qkv, width, h, M, qkv, qkv_w)) != SF_OK) goto done;
    if (stopping()) { rc = SF_ESTOPPED; goto done; }
    add_bias(qkv, M, qkv_w, qkv_w, L->qkv_bias);
    rc = attention_locked(k, qkv, qkv_w, qkv + H * D, qkv + (H + KV) * D, qkv_w, M, H, KV, D, cos, sin, k_cache,
                          v_cache, cap, past, L->scale, att);
    if (rc == SF_OK && stopping()) rc = SF_ESTOPPED;
    if (rc != SF_OK || (rc = matmul_locked(k, L->o.type, L->o.w, width, H * D, att, M, t, width, listening)) != SF_OK) goto done;
    add_bias(t, M, width, width, L->o_bias);
    for (int64_t i = 0; i < M * width; i++) x[i] = x[i] + t[i];
    if (stopping()) { rc = SF_ESTOPPED; goto done; }
    k->rmsnorm(x, L->ffn_norm, M, width, L->eps, h);
    if ((rc = parts_locked(k, L->gate_up, L->n_gate_up, width, h, M, gate_up, 2 * F)) != SF_OK) goto done;
    if (stopping()) { rc = SF_ESTOPPED; goto done; }
    add_bias(gate_up, M, 2 * F, 2 * F, L->gate_up_bias);
    k->silu_mul(gate_up, M, F, act);
    if ((rc = matmul_locked(k, L->down.type, L->down.w, width, F, act, M, t, width, listening)) != SF_OK) goto done;
    add_bias(t, M, width, width, L->down_bias);
    for (int64_t i = 0; i < M * width; i++) x[i] = x[i] + t[i];
done:
    pthread_mutex_unlock(&call_mu);
    return rc;
}
