/* AVX-512 with VNNI (Intel Ice Lake and later, AMD Zen 4 and later): x86_body.h with VNNI's
 * fused u8 x s8 and s16 x s16 dot products (vpdpbusd, vpdpwssd) on 256-bit registers
 * (AVX512VL), which replace two or three instructions of the AVX2 code per step. 256 bits,
 * not 512: Zen 4 runs a 512-bit operation as two 256-bit halves, and the blocks' 32-value
 * sub-blocks fit a 256-bit register. dispatch.c runs it where the CPU has avx512f, avx512bw,
 * avx512vl and avx512vnni (plus AVX2's flags). */
#include "blocks.h"

#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#define SF_X86_VNNI 1
#define SF_X86_RMAX 8  /* 32 vector registers */
#include "x86_body.h"

const struct sf_kernels sf_kernels_avx512 = SF_X86_KERNELS("avx512");

#endif /* __x86_64__ */
