/* The machine's own limits that `bench kernels` sets the products against: the dot-product
 * unit's rate (each ISA file's dot_loop, on every thread at once) and a plain read of memory. */
#include "internal.h"

#include <time.h>

#include "specfill_kernels.h"

#define SF_READ_CHUNK (256 * 1024)  /* bytes per unit of the split over the threads: a multiple of 8 */

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

const char *sf_dot_form(int variant, int form) {
    const struct sf_kernels *k = sf_kernels_of(variant);
    return k == NULL || k->dot_loop == NULL || form < 0 || form > 1 ? NULL : k->dot_forms[form];
}

struct peak_ctx {
    const struct sf_kernels *k;
    int form;
    int64_t iters;
    _Atomic int64_t macs;
};

static void peak_share(const void *p, int s, int ns) {
    (void)s, (void)ns;
    struct peak_ctx *c = (struct peak_ctx *)p;
    atomic_fetch_add(&c->macs, c->k->dot_loop(c->form, c->iters));
}

double sf_dot_peak(int variant, int form, int64_t iters) {
    if (sf_dot_form(variant, form) == NULL || iters <= 0) return -1.0;
    struct peak_ctx c = {sf_kernels_of(variant), form, iters, 0};
    sf_lock_call();
    const int shares = sf_job_shares(1 << 30, 1 << 30);  /* one a thread */
    const struct sf_job j = {peak_share, &c, shares};
    const double start = seconds_now();
    sf_run_job(&j);
    const double seconds = seconds_now() - start;
    sf_unlock_call();
    return (double)atomic_load(&c.macs) / seconds * 1e-9;
}

struct read_ctx {
    const uint8_t *p;
    size_t bytes;
    _Atomic uint64_t sum;
};

/* 8-byte words xor-ed into 8 independent sums (a tail of fewer than 8 bytes as a word padded
 * with zeros): the compiler vectorizes it for the build's baseline (16-byte loads on x86-64),
 * far more than a core's share of DRAM bandwidth. */
static uint64_t read_plain(const uint8_t *p, size_t bytes) {
    uint64_t s[8] = {0};
    const size_t words = bytes / 8;
    size_t i = 0;
    for (; i + 8 <= words; i += 8)
        for (int l = 0; l < 8; l++) {
            uint64_t v;
            memcpy(&v, p + 8 * (i + l), sizeof v);
            s[l] ^= v;
        }
    for (; i < words; i++) {
        uint64_t v;
        memcpy(&v, p + 8 * i, sizeof v);
        s[0] ^= v;
    }
    uint64_t tail = 0;
    memcpy(&tail, p + 8 * words, bytes % 8);
    return s[0] ^ s[1] ^ s[2] ^ s[3] ^ s[4] ^ s[5] ^ s[6] ^ s[7] ^ tail;
}

static void read_share(const void *p, int s, int ns) {
    struct read_ctx *c = (struct read_ctx *)p;
    const size_t chunks = (c->bytes + SF_READ_CHUNK - 1) / SF_READ_CHUNK;
    uint64_t sum = 0;
    for (size_t i = chunks * (size_t)s / (size_t)ns; i < chunks * (size_t)(s + 1) / (size_t)ns; i++) {
        const size_t at = i * SF_READ_CHUNK, n = c->bytes - at < SF_READ_CHUNK ? c->bytes - at : SF_READ_CHUNK;
        sum ^= read_plain(c->p + at, n);
    }
    atomic_fetch_xor(&c->sum, sum);
}

uint64_t sf_read_bytes(const void *p, size_t bytes) {
    if (p == NULL || bytes == 0) return 0;
    struct read_ctx c = {p, bytes, 0};
    sf_lock_call();
    const int64_t chunks = (int64_t)((bytes + SF_READ_CHUNK - 1) / SF_READ_CHUNK);
    const struct sf_job j = {read_share, &c, sf_job_shares((int64_t)(bytes / SF_MIN_SHARE_VALUES), chunks)};
    sf_run_job(&j);
    sf_unlock_call();
    return atomic_load(&c.sum);
}
