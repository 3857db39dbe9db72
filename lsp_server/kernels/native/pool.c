/* The call lock and the library's own thread pool (pthreads, not OpenMP: torch ships its own
 * libgomp): share 0 of a job runs on the caller, share i on worker i. */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "specfill_kernels.h"

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
static int default_threads = 1;
static int want_threads = 1;      /* under call_mu */
static pthread_mutex_t call_mu = PTHREAD_MUTEX_INITIALIZER;  /* one call at a time */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;        /* bumped once per job (and to stop) */
    atomic_int pending;     /* workers not yet done with the current job */
    atomic_int sleepers;    /* workers waiting on cv */
    atomic_int quit;
    const struct sf_job *job;  /* written before gen is bumped */
    unsigned start_gen;     /* gen when the workers were made */
    int nworkers;
    pthread_t tids[SF_MAX_THREADS];
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

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

/* The forked child has no workers: forget them (the parent's stay the parent's). */
static void pool_after_fork_child(void) {
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.cv, NULL);
    atomic_store(&pool.pending, 0);
    atomic_store(&pool.sleepers, 0);
    atomic_store(&pool.quit, 0);
    pool.nworkers = 0;
}

static void lock_for_fork(void) { pthread_mutex_lock(&call_mu); }
static void unlock_after_fork(void) { pthread_mutex_unlock(&call_mu); }
static void child_after_fork(void) {
    pool_after_fork_child();
    pthread_mutex_unlock(&call_mu);
}

static void init_once_fn(void) {
    default_threads = affinity_cpus();
    if (default_threads > SF_MAX_THREADS) default_threads = SF_MAX_THREADS;
    want_threads = default_threads;
    pthread_atfork(lock_for_fork, unlock_after_fork, child_after_fork);
}

void sf_lock_call(void) {
    pthread_once(&init_once, init_once_fn);
    pthread_mutex_lock(&call_mu);
}

void sf_unlock_call(void) { pthread_mutex_unlock(&call_mu); }

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
    atomic_fetch_add(&pool.sleepers, 1);  /* seq_cst: pairs with sf_run_job's gen bump */
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
        const struct sf_job *j = pool.job;
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

void sf_run_job(const struct sf_job *j) {
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

int sf_job_shares(int64_t wanted, int64_t units) {
    if (wanted > want_threads) wanted = want_threads;
    if (wanted > units) wanted = units;
    if (wanted < 1) wanted = 1;
    if (wanted > 1) pool_ensure(want_threads);
    return (int)wanted;
}

struct rows_ctx {
    void (*fn)(const void *ctx, int64_t a, int64_t b);
    const void *ctx;
    int64_t M;
};

static void rows_share(const void *p, int s, int ns) {
    const struct rows_ctx *c = p;
    c->fn(c->ctx, c->M * s / ns, c->M * (s + 1) / ns);
}

void sf_run_rows(void (*fn)(const void *ctx, int64_t a, int64_t b), const void *ctx, int64_t M, int64_t per_row) {
    const struct rows_ctx c = {fn, ctx, M};
    const struct sf_job j = {rows_share, &c, sf_job_shares(M * per_row / SF_ROWS_SHARE_VALUES, M)};
    if (j.nshares == 1) fn(ctx, 0, M);
    else sf_run_job(&j);
}

void *sf_scratch_grow(void **buf, size_t *cap, size_t bytes) {
    if (bytes <= *cap) return *buf;
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes) != 0) return NULL;
    free(*buf);
    *buf = p;
    *cap = bytes;
    return p;
}

void sf_set_threads(int n) {
    sf_lock_call();
    want_threads = n <= 0 ? default_threads : (n > SF_MAX_THREADS ? SF_MAX_THREADS : n);
    if (pool.nworkers != want_threads - 1) pool_stop();  /* remade at the next call */
    sf_unlock_call();
}

void sf_set_spin_us(int us) {
    atomic_store_explicit(&spin_ns, (int64_t)(us < 0 ? 0 : us) * 1000, memory_order_relaxed);
}

int sf_get_threads(void) {
    sf_lock_call();
    const int n = want_threads;
    sf_unlock_call();
    return n;
}
