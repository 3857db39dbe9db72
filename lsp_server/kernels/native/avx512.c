/* AVX-512 with VNNI (Intel Ice Lake and later, AMD Zen 4 and later): x86_body.h with VNNI's
 * fused u8 x s8 and s16 x s16 dot products (vpdpbusd, vpdpwssd). The repacked K-quant
 * products (most of a step) do their integer work on 512-bit registers: Sapphire Rapids
 * issues two zmm vpdpbusd a cycle, as many as ymm, so the multiply-add rate doubles; Zen 4
 * splits a zmm in two, the same rate as ymm with fewer instructions. The rest stays on
 * 256-bit registers (AVX512VL), where the 32-value blocks fit. variants.c runs it where the
 * CPU has avx512f, avx512bw, avx512vl and avx512vnni (plus AVX2's flags). */
#include "blocks.h"

#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define SF_X86_VNNI 1
#define SF_X86_RMAX 8  /* 32 vector registers */
#define SF_X8_RMAX 8    /* rows per pass over a repacked group: Q8_0, Q5_0, Q4_0 */
#define SF_X8K_RMAX 13  /* Q4_K, Q6_K: one zmm a row (q4_K_x8_ints_zmm); 14+ spilled (bench kernels) */
#define SF_PREFETCH_FAR_ROWS 4  /* x86_body.h prefetch_ahead: from 4 rows, also 8 KiB ahead into L2 */
#include "x86_body.h"
#include "x86_peak.h"
#include "x86_wide.h"
#include "x86_wide_q4_0.h"

const struct sf_kernels sf_kernels_avx512 = SF_X86_KERNELS("avx512");

#endif /* __x86_64__ */
