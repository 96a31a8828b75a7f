#include "cformers/gemm.h"

void cf_sgemm_reference(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float *A, long lda,
                        const float *B, long ldb, float beta, float *C, long ldc) {
    for (long i = 0; i < M; i++) {
        for (long j = 0; j < N; j++) {
            double acc = 0.0;
            for (long k = 0; k < K; k++) {
                double a = trans_a ? A[k * lda + i] : A[i * lda + k];
                double b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                acc += a * b;
            }
            float prev = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
            C[i * ldc + j] = (float)(alpha * acc) + prev;
        }
    }
}
