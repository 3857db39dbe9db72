/* AVX2 + FMA + F16C: the x86 floor. The kernels are x86_body.h, compiled for this ISA by the
 * pragma, so the library builds with plain flags; variants.c runs it where the CPU has
 * avx2, fma and f16c. */
#include "blocks.h"

#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")
#define SF_X86_VNNI 0
#define SF_X86_RMAX 6  /* 16 vector registers */
/* Q4_K / Q6_K rows per pass over a repacked group: at 6, a row's two int16 sums beside the
 * unpacked weights spill (the R = 5 pass of 16 = 6 + 5 + 5 rows was the slowest of all).
 * One thread, best of 800 calls, AMD EPYC Zen 4, SPECFILL_KERNEL=avx2, Q4_K 2048 x 1536 in
 * L2, GMAC/s at 6 -> 5: 16 rows 61.8 -> 77.7, 12 rows 73.6 -> 77.9, 5 rows 62.0 -> 72.3, 4 rows
 * 73.9 -> 75.3; Q6_K 1024 x 1536: 16 rows 54.9 -> 57.2, 6 rows 53.2 -> 58.6, 5 rows 55.5 -> 53.6. */
#define SF_X8K_RMAX 5
#include "x86_body.h"
#include "x86_peak.h"
#include "avx2_wide.h"
#include "avx2_wide_q4_0.h"

const struct sf_kernels sf_kernels_avx2 = SF_X86_KERNELS("avx2");

#endif /* __x86_64__ */
