/* The loop around a variant's repacked (x8) product: weight groups of 8 rows in turn, and
 * for each group its activation rows up to RMAX at a time, so that the group's blocks stay
 * in L1 while the rows pass. SWITCH(DOT, group, x, R, nb, out) calls DOT with R as a
 * constant (each ISA file's own switch), out[k][n] = row m + k's dot with weight row r + n.
 * Shared by the ISA files; the reference (ref.c) has its own plain loops. */
#ifndef SF_ROWS_X8_H
#define SF_ROWS_X8_H

#define SF_ROWS_X8(NAME, DOT, SWITCH, GROUP, ACT, QK, RMAX)                                    \
    static void NAME(const uint8_t *w, size_t wrb, int64_t nrows, const uint8_t *xq, size_t xrb, \
                     int64_t M, int64_t K, float *y, int64_t ldy) {                              \
        const int64_t nb = K / (QK);                                                             \
        for (int64_t r = 0; r < nrows; r += 8) {                                                 \
            const GROUP *group = (const GROUP *)(w + r * wrb);                                   \
            const ACT *x[RMAX];                                                                  \
            float out[RMAX][8];                                                                  \
            for (int64_t m = 0; m < M;) {                                                        \
                /* rows split evenly over the passes: 9 = 5 + 4, not 8 + 1, whose one-row pass   \
                 * re-unpacks every block for a single row */                                    \
                const int64_t left = M - m, passes = (left + (RMAX) - 1) / (RMAX);               \
                const int R = (int)((left + passes - 1) / passes);                               \
                for (int k = 0; k < R; k++) x[k] = (const ACT *)(xq + (m + k) * xrb);            \
                SWITCH(DOT, group, x, R, nb, out)                                                \
                for (int k = 0; k < R; k++)                                                      \
                    for (int n = 0; n < 8; n++) y[(m + k) * ldy + r + n] = out[k][n];            \
                m += R;                                                                          \
            }                                                                                    \
        }                                                                                        \
    }

#endif /* SF_ROWS_X8_H */
