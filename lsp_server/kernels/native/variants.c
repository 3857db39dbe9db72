/* Which variant runs: the table of struct sf_kernels, what each needs of the CPU, and the
 * choice at start-up. Adding an ISA = one file that defines a `struct sf_kernels` (see
 * blocks.h), one entry in `variants` below and its needs in `cpu_runs` / `needs`. */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <strings.h>
#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include "specfill_kernels.h"

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

/* Each x86 variant's needs once, as (the compiler's name, /proc/cpuinfo's name): cpu_runs
 * checks the first, sf_variant_needs reports the second, so the two cannot drift apart. */
#define SF_AVX2_NEEDS(X) X("avx2", "avx2") X("fma", "fma") X("f16c", "f16c")
#define SF_AVX512_NEEDS(X) \
    SF_AVX2_NEEDS(X) X("avx512f", "avx512f") X("avx512bw", "avx512bw") X("avx512vl", "avx512vl") \
    X("avx512vnni", "avx512_vnni")
#define SF_CPUINFO_NAME(builtin, cpuinfo) " " cpuinfo
#define SF_CPU_SUPPORTS(builtin, cpuinfo) && __builtin_cpu_supports(builtin)

/* Space-separated, with a leading space the caller skips; NEON: Advanced SIMD is part of
 * AArch64, the dot-product extension (HWCAP_ASIMDDP) is not. */
static const char *const needs[SF_NVARIANTS] = {
    [SF_SCALAR] = " ",
    [SF_AVX2] = SF_AVX2_NEEDS(SF_CPUINFO_NAME),
    [SF_AVX512] = SF_AVX512_NEEDS(SF_CPUINFO_NAME),
    [SF_NEON] = " asimd asimddp",
};

/* What the CPU (and the OS, for the vector state) can run; the compiler's cpu model checks
 * XCR0 too. Kept out of the ISA files, which are compiled for their ISA. */
static int cpu_runs(int v) {
    switch (v) {
    case SF_SCALAR:
        return 1;
#if defined(__x86_64__)
    case SF_AVX2:
        __builtin_cpu_init();
        return 1 SF_AVX2_NEEDS(SF_CPU_SUPPORTS);
    case SF_AVX512:
        __builtin_cpu_init();
        return 1 SF_AVX512_NEEDS(SF_CPU_SUPPORTS);
#endif
#if defined(__aarch64__)
    case SF_NEON:
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

const char *sf_variant_needs(int v) { return v >= 0 && v < SF_NVARIANTS ? needs[v] + 1 : NULL; }

static pthread_once_t choice_once = PTHREAD_ONCE_INIT;
static atomic_int current_variant;

/* SPECFILL_KERNEL where this CPU runs it, else the best one (the caller reports a refusal) */
static void choose_at_start(void) {
    int v = sf_variant_best();
    const char *env = getenv("SPECFILL_KERNEL");
    if (env != NULL)
        for (int i = 0; i < SF_NVARIANTS; i++)
            if (strcasecmp(env, variant_names[i]) == 0 && sf_variant_supported(i)) v = i;
    atomic_store(&current_variant, v);
}

int sf_set_variant(int v) {
    pthread_once(&choice_once, choose_at_start);
    if (!sf_variant_supported(v)) return -1;
    atomic_store(&current_variant, v);
    return 0;
}

int sf_get_variant(void) {
    pthread_once(&choice_once, choose_at_start);
    return atomic_load(&current_variant);
}

const struct sf_kernels *sf_current_kernels(void) { return variants[sf_get_variant()]; }

const struct sf_kernels *sf_kernels_of(int v) { return sf_variant_supported(v) ? variants[v] : NULL; }
