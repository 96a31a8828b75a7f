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

/* Element i of a row: f32, or bf16 widened. */
static inline float element_at(const void *row, long i, bool bf16) {
    return bf16 ? cf_bf16_to_f32(((const cf_bf16 *)row)[i]) : ((const float *)row)[i];
}

/* A's rows f32, B's f32 or bf16. */
static inline void dot_elems(int m, int n, long k, const float *a, long lda, const void *b, long ldb, float *c,
                             long ldc, float alpha, float beta, bool bf16) {
    size_t elem = bf16 ? sizeof(cf_bf16) : sizeof(float);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            const char *bj = (const char *)b + (size_t)(j * ldb) * elem;
            float acc = 0.0f;
            for (long p = 0; p < k; p++) acc += a[i * lda + p] * element_at(bj, p, bf16);
            float *cij = c + i * ldc + j;
            *cij = beta == 0.0f ? alpha * acc : alpha * acc + beta * *cij;
        }
}

static void dot(int m, int n, long k, const void *a, long lda, const void *b, long ldb, float *c, long ldc, float alpha,
                float beta) {
    dot_elems(m, n, k, a, lda, b, ldb, c, ldc, alpha, beta, false);
}

static void dot_bf16(int m, int n, long k, const void *a, long lda, const void *b, long ldb, float *c, long ldc,
                     float alpha, float beta) {
    dot_elems(m, n, k, a, lda, b, ldb, c, ldc, alpha, beta, true);
}

const gemm_kernel cf_gemm_kernel_f32_scalar = {
    .name = "scalar-f32", .mr = MR, .nr = NR, .k_group = 1, .elem_bytes = 4, .macs_per_cycle = 4,
    .pack_a = cf_gemm_pack_a_f32, .pack_b = cf_gemm_pack_b_f32, .tile = tile};

const gemm_skinny cf_gemm_skinny_scalar = {
    .nn = gemm_skinny_rows, .dot = dot, .dot_bf16 = dot_bf16, .dot_rows = MR, .dot_cols = MR};
