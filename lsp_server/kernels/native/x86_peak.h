/* The dot-product unit's own rate on this core, for `bench kernels` to report the products'
 * share of it: `iters` rounds of independent multiply-add chains on registers, no loads and
 * no scalar work but the loop counter. The rounds are inline assembly on named accumulators:
 * as intrinsics, or as an array, GCC 12 copied every accumulator to the stack each round.
 * Form 0 is the widest form the variant's products use, form 1 the other one. Returns the
 * int8 multiply-adds done; 0 for a form the variant lacks. */
#ifndef SF_X86_PEAK_H
#define SF_X86_PEAK_H

/* 10 independent chains: vpdpbusd's latency at two a cycle (Sapphire Rapids: 5 cycles), and
 * what AVX2's 16 registers hold beside the inputs and two temporaries */
#define SF_PEAK_CHAINS 10
#define SF_PEAK_ACCS(VEC, ZERO) VEC c0 = ZERO, c1 = ZERO, c2 = ZERO, c3 = ZERO, c4 = ZERO, c5 = ZERO, \
                                    c6 = ZERO, c7 = ZERO, c8 = ZERO, c9 = ZERO
#define SF_PEAK_OPERANDS                                                                           \
    [c0] "+v"(c0), [c1] "+v"(c1), [c2] "+v"(c2), [c3] "+v"(c3), [c4] "+v"(c4), [c5] "+v"(c5),   \
    [c6] "+v"(c6), [c7] "+v"(c7), [c8] "+v"(c8), [c9] "+v"(c9)
/* chain i, and the temporary it may use: two, in turn */
#define SF_PEAK_STEPS(STEP) \
    STEP(0, 0) STEP(1, 1) STEP(2, 0) STEP(3, 1) STEP(4, 0) STEP(5, 1) STEP(6, 0) STEP(7, 1) STEP(8, 0) STEP(9, 1)
/* what the chains hold, so that none is dead code */
#define SF_PEAK_FOLD(W)                                                                                  \
    _mm_cvtsi128_si64(_mm##W##_castsi##W##_si128(c0)) ^ _mm_cvtsi128_si64(_mm##W##_castsi##W##_si128(c5)) ^ \
        _mm_cvtsi128_si64(_mm##W##_castsi##W##_si128(c9))

#if SF_X86_VNNI
#define SF_DOT_FORMS {"vpdpbusd zmm", "vpdpbusd ymm"}
#define SF_DPBUSD(i, t) "vpdpbusd %[b], %[a], %[c" #i "]\n\t"
#define SF_PEAK_DPBUSD(W, BYTES)                                                              \
    do {                                                                                      \
        SF_PEAK_ACCS(__m##W##i, _mm##W##_setzero_si##W());                                    \
        const __m##W##i a = _mm##W##_set1_epi8(3), b = _mm##W##_set1_epi8(5);                 \
        for (int64_t i = 0; i < iters; i++)                                                   \
            __asm__ volatile(SF_PEAK_STEPS(SF_DPBUSD) : SF_PEAK_OPERANDS : [a] "v"(a), [b] "v"(b)); \
        sink = SF_PEAK_FOLD(W);                                                               \
        return iters * SF_PEAK_CHAINS * (BYTES);                                              \
    } while (0)

static int64_t dot_peak_loop(int form, int64_t iters) {
    volatile long long sink = 0;
    if (form == 0) SF_PEAK_DPBUSD(512, 64);
    if (form == 1) SF_PEAK_DPBUSD(256, 32);
    (void)sink;
    return 0;
}
#else
/* AVX2: the products' own inner step (maddubs into int16 sums, widened once per 8 quads) and
 * ggml's classic one (maddubs, madd with ones to int32, add) */
#define SF_DOT_FORMS {"vpmaddubsw+vpaddw ymm", "vpmaddubsw+vpmaddwd+vpaddd ymm"}
#define SF_MADDUBS_ADD16(i, t) "vpmaddubsw %[b], %[a], %[t" #t "]\n\tvpaddw %[t" #t "], %[c" #i "], %[c" #i "]\n\t"
#define SF_MADDUBS_MADD(i, t)                                                                    \
    "vpmaddubsw %[b], %[a], %[t" #t "]\n\tvpmaddwd %[one], %[t" #t "], %[t" #t "]\n\t"            \
    "vpaddd %[t" #t "], %[c" #i "], %[c" #i "]\n\t"

static int64_t dot_peak_loop(int form, int64_t iters) {
    SF_PEAK_ACCS(__m256i, _mm256_setzero_si256());
    __m256i t0, t1;
    const __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5), one = _mm256_set1_epi16(1);
    if (form == 0)
        for (int64_t i = 0; i < iters; i++)
            __asm__ volatile(SF_PEAK_STEPS(SF_MADDUBS_ADD16)
                             : SF_PEAK_OPERANDS, [t0] "=&x"(t0), [t1] "=&x"(t1)
                             : [a] "x"(a), [b] "x"(b));
    else if (form == 1)
        for (int64_t i = 0; i < iters; i++)
            __asm__ volatile(SF_PEAK_STEPS(SF_MADDUBS_MADD)
                             : SF_PEAK_OPERANDS, [t0] "=&x"(t0), [t1] "=&x"(t1)
                             : [a] "x"(a), [b] "x"(b), [one] "x"(one));
    else
        return 0;
    volatile long long sink = SF_PEAK_FOLD(256);
    (void)sink;
    return iters * SF_PEAK_CHAINS * 32;
}
#endif

#endif /* SF_X86_PEAK_H */
