/* Portable C kernels, for CPUs without AVX2. A 4 x 16 tile written so the compiler can
 * vectorise the j loop with whatever baseline vectors the target has (SSE2 on x86-64). */
#include "gemm_internal.h"
#include "gemm_skinny_rows.h"

enum { MR = 4, NR = 16 };

static void store(int m, int n, float acc[][NR], float *c, long ldc, float alpha, float beta) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float *cij = c + i * ldc + j;
            *cij = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * *cij;
        }
}

static void tile(long k, const void *a_packed, const void *b_packed, float *c, long ldc, int m, int n, float alpha,
                 float beta) {
    const float *a = a_packed, *b = b_packed;
    float acc[MR][NR] = {{0}};
    for (long p = 0; p < k; p++, a += MR, b += NR)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < NR; j++) acc[i][j] += a[i] * b[j];
    store(m, n, acc, c, ldc, alpha, beta);
}

static void dot(int m, int n, long k, const void *av, long lda, const void *bv, long ldb, float *c, long ldc,
                float alpha, float beta) {
    const float *a = av, *b = bv;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (long p = 0; p < k; p++) acc += a[i * lda + p] * b[j * ldb + p];
            float *cij = c + i * ldc + j;
            *cij = beta == 0.0f ? alpha * acc : alpha * acc + beta * *cij;
        }
}

const gemm_kernel cf_gemm_kernel_f32_scalar = {
    .name = "scalar-f32", .mr = MR, .nr = NR, .k_group = 1, .elem_bytes = 4,
    .pack_a = cf_gemm_pack_a_f32, .pack_b = cf_gemm_pack_b_f32, .tile = tile};

const gemm_skinny cf_gemm_skinny_scalar = {.nn = gemm_skinny_rows, .dot = dot, .dot_rows = MR, .dot_cols = MR};
