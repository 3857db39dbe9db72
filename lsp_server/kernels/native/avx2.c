/* AVX2 + FMA + F16C: the x86 floor. The kernels are x86_body.h, compiled for this ISA by the
 * pragma, so the library builds with plain flags; variants.c runs it where the CPU has
 * avx2, fma and f16c. */
#include "blocks.h"

#if defined(__x86_64__)

#pragma GCC target("avx2,fma,f16c")
#define SF_X86_VNNI 0
#define SF_X86_RMAX 6  /* 16 vector registers */
#include "x86_body.h"
#include "x86_peak.h"

const struct sf_kernels sf_kernels_avx2 = SF_X86_KERNELS("avx2");

#endif /* __x86_64__ */
