/* Placeholder dispatch until the blocked kernels of issue 3 land: correct, slow. */
#include "cformers/gemm.h"

#include <stdlib.h>

void cf_sgemm(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float *A, long lda,
              const float *B, long ldb, float beta, float *C, long ldc) {
    cf_sgemm_reference(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void cf_gemm_bf16(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const cf_bf16 *A, long lda,
                  const cf_bf16 *B, long ldb, float beta, float *C, long ldc) {
    long rows_a = trans_a ? K : M, rows_b = trans_b ? N : K;
    float *a = malloc(sizeof(float) * (size_t)(rows_a * lda));
    float *b = malloc(sizeof(float) * (size_t)(rows_b * ldb));
    cf_convert_bf16_to_f32(A, a, (size_t)(rows_a * lda));
    cf_convert_bf16_to_f32(B, b, (size_t)(rows_b * ldb));
    cf_sgemm_reference(trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, C, ldc);
    free(a);
    free(b);
}

void cf_sgemm_strided_batched(bool trans_a, bool trans_b, long M, long N, long K, float alpha, const float *A,
                              long lda, long stride_a, const float *B, long ldb, long stride_b, float beta, float *C,
                              long ldc, long stride_c, long batch) {
    for (long i = 0; i < batch; i++)
        cf_sgemm(trans_a, trans_b, M, N, K, alpha, A + i * stride_a, lda, B + i * stride_b, ldb, beta, C + i * stride_c,
                 ldc);
}
