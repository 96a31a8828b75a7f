/* The flash-attention bf16 tile product with vdpbf16ps: each instruction multiplies 16
 * pairs of bf16 and adds both products to 16 f32 sums (twice the work of an f32 FMA;
 * some CPUs issue it at half the FMA rate). Register-blocked as the f32 AVX-512 product
 * (4 rows x up to 64 columns of C in 16 zmm accumulators), a pair of A broadcast per row,
 * B's packed pairs read in place. */
#include <immintrin.h>
#include <string.h>

#include "kernels/flash_attention.h"
#include "kernels/flash_attention_block_avx512.h"

INLINE __m512bh as_bh(__m512i v) {
    __m512bh r;
    memcpy(&r, &v, sizeof r);
    return r;
}

/* Pair p of row a broadcast; `single`: only its low element exists (the last pair of
 * an odd K), the high half is zero. */
INLINE __m512bh a_pair(const cf_bf16 *a, long p, bool single) {
    uint32_t w = a[2 * p];
    if (!single) memcpy(&w, a + 2 * p, sizeof w);
    return as_bh(_mm512_set1_epi32((int)w));
}

/* c += A's pair p times B's row of pairs p. */
INLINE void pair_step(int rows, int vecs, __m512 c[ROWS][MAX_VECS], const cf_bf16 *A, long lda, const uint32_t *b_row,
                      long p, bool single, __mmask16 tail) {
    __m512bh b[MAX_VECS];
    UNROLL for (int v = 0; v < vecs; v++) b[v] = as_bh(_mm512_maskz_loadu_epi32(lane_mask(v, vecs, tail), b_row + v * LANES));
    UNROLL for (int r = 0; r < rows; r++) {
        __m512bh a = a_pair(A + r * lda, p, single);
        UNROLL for (int v = 0; v < vecs; v++) c[r][v] = _mm512_dpbf16_ps(c[r][v], a, b[v]);
    }
}

/* C[rows x vecs*16] (+)= A[rows x K] B[K x ...]. */
INLINE void block(int rows, int vecs, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C,
                  long ldc, __mmask16 tail, bool accumulate) {
    __m512 c[ROWS][MAX_VECS];
    block_load(rows, vecs, c, C, ldc, tail, accumulate);
    for (long p = 0; p < K / 2; p++) pair_step(rows, vecs, c, A, lda, B + p * ldb, p, false, tail);
    if (K % 2) pair_step(rows, vecs, c, A, lda, B + K / 2 * ldb, K / 2, true, tail);
    block_store(rows, vecs, c, C, ldc, tail);
}

#define BLOCK_VECS(rows)                                                                                               \
    switch (vecs) {                                                                                                    \
    case 1: block(rows, 1, K, A, lda, B, ldb, C, ldc, tail, accumulate); break;                                        \
    case 2: block(rows, 2, K, A, lda, B, ldb, C, ldc, tail, accumulate); break;                                        \
    case 3: block(rows, 3, K, A, lda, B, ldb, C, ldc, tail, accumulate); break;                                        \
    default: block(rows, 4, K, A, lda, B, ldb, C, ldc, tail, accumulate); break;                                       \
    }

static void block_4(int vecs, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C, long ldc,
                    __mmask16 tail, bool accumulate) {
    BLOCK_VECS(4)
}

static void block_1(int vecs, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C, long ldc,
                    __mmask16 tail, bool accumulate) {
    BLOCK_VECS(1)
}

void cf_fa_gemm_bf16_avx512bf16(long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb,
                                float *C, long ldc, bool accumulate) {
    FOR_EACH_BLOCK(M, N, block_4(vecs, K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc, tail, accumulate),
                   block_1(vecs, K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc, tail, accumulate))
}
