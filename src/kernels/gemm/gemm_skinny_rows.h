/* The decode path for B not transposed, in plain C for the compiler to vectorise with
 * whatever the including file is compiled for (AVX2, or baseline SSE2): a window of C's
 * rows stays in L1 while B streams by rows, so B is read in long contiguous runs. C is
 * scaled by beta first, then takes four rows of B at a time. */
#ifndef CFORMERS_GEMM_SKINNY_ROWS_H
#define CFORMERS_GEMM_SKINNY_ROWS_H

enum { SKINNY_ROWS_WINDOW = 2048 };

static inline void gemm_skinny_rows(long m, long n, long k, float alpha, const float *a, long a_rs, long a_ks,
                                    const float *b, long ldb, float beta, float *c, long ldc) {
    for (long j0 = 0; j0 < n; j0 += SKINNY_ROWS_WINDOW) {
        long w = n - j0 < SKINNY_ROWS_WINDOW ? n - j0 : SKINNY_ROWS_WINDOW;
        for (long i = 0; i < m; i++) {
            float *ci = c + i * ldc + j0;
            for (long j = 0; j < w; j++) ci[j] = beta == 0.0f ? 0.0f : beta * ci[j];
        }
        for (long p = 0; p < k; p += 4) {
            long rows = k - p < 4 ? k - p : 4;
            const float *b0 = b + p * ldb + j0;
            for (long i = 0; i < m; i++) {
                const float *ai = a + i * a_rs + p * a_ks;
                float *ci = c + i * ldc + j0;
                if (rows == 4) {
                    float x0 = alpha * ai[0], x1 = alpha * ai[a_ks], x2 = alpha * ai[2 * a_ks], x3 = alpha * ai[3 * a_ks];
                    const float *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
                    for (long j = 0; j < w; j++) ci[j] += x0 * b0[j] + x1 * b1[j] + x2 * b2[j] + x3 * b3[j];
                } else {
                    for (long r = 0; r < rows; r++) {
                        float x = alpha * ai[r * a_ks];
                        const float *br = b0 + r * ldb;
                        for (long j = 0; j < w; j++) ci[j] += x * br[j];
                    }
                }
            }
        }
    }
}

#endif
