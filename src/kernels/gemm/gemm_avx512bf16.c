/* AVX-512 BF16 kernel: vdpbf16ps multiplies pairs of bf16 values and adds both products
 * to an f32 lane, so A and B are packed as pairs of consecutive k values. A 12 x 32
 * tile: 24 zmm accumulators, per k pair two B loads and twelve 32-bit broadcasts of A.
 * Reached only through the AVX-512 kernel context with bf16 on vdpbf16ps or AMX. */
#include "gemm_avx512_inline.h"
#include "gemm_internal.h"

#include <stdint.h>
#include <string.h>

enum { MR = 12, NR = 32 };


GEMM_INLINE __m512bh as_bh(__m512i v) {
    __m512bh r;
    memcpy(&r, &v, sizeof r);
    return r;
}

/* m rows by 16 * halves columns (constants after inlining; one half where the last panel
 * of B has at most 16 columns, as in gemm_avx512.c). */
GEMM_INLINE void tile_body(const int m, const int halves, long k, const uint32_t *a, const uint32_t *b, float *c,
                           long ldc, int n, float alpha, float beta) {
    __m512 acc[MR][TILE_MAX_VECS];
#pragma GCC unroll 12
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    long pairs = (k + 1) / 2;
    for (long q = 0; q < pairs; q++) {
        __m512bh bv[2];
        for (int h = 0; h < halves; h++) bv[h] = as_bh(_mm512_loadu_si512(b + 16 * h));
#pragma GCC unroll 12
        for (int i = 0; i < m; i++) {
            __m512bh ai = as_bh(_mm512_set1_epi32((int)a[i]));
            for (int h = 0; h < halves; h++) acc[i][h] = _mm512_dpbf16_ps(acc[i][h], ai, bv[h]);
        }
        a += MR;
        b += NR;
    }
    store_tile_rows(m, halves, acc, c, ldc, n, alpha, beta);
}

#define TILE_VARIANTS(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)
#define PACKED_TILE(M)                                                                                                \
    static void tile_##M(long k, const void *a, const void *b, float *c, long ldc, int n, float alpha, float beta) { \
        if (n > 16) tile_body(M, 2, k, a, b, c, ldc, n, alpha, beta);                                              \
        else tile_body(M, 1, k, a, b, c, ldc, n, alpha, beta);                                                     \
    }
TILE_VARIANTS(PACKED_TILE)

typedef void (*tile_fn)(long, const void *, const void *, float *, long, int, float, float);
#define LIST_TILE(M) tile_##M,
static const tile_fn tiles[MR] = {TILE_VARIANTS(LIST_TILE)};

static void tile(long k, const void *a, const void *b, float *c, long ldc, int m, int n, float alpha, float beta) {
    tiles[m - 1](k, a, b, c, ldc, n, alpha, beta);
}

/* Decode against transposed bf16 B: one row of A against four rows of B, 32 k values
 * (16 pairs) per vdpbf16ps; B's rows stay in L1 across the rows of A. Missing columns
 * reread row 0 and are not stored. */
void cf_gemm_dot_bf16(int rows, int cols, long k, const void *a, long lda, const void *b, long ldb, float *c, long ldc,
                      float alpha, float beta) {
    const cf_bf16 *b0 = b, *b1 = b0 + (cols > 1 ? ldb : 0), *b2 = b0 + (cols > 2 ? 2 * ldb : 0);
    const cf_bf16 *b3 = b0 + (cols > 3 ? 3 * ldb : 0);
    for (int i = 0; i < rows; i++) {
        const cf_bf16 *ai = (const cf_bf16 *)a + i * lda;
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (long p = 0; p < k; p += 32) {
            __mmask32 mk = lanes32(k - p);
            __m512bh x = as_bh(_mm512_maskz_loadu_epi16(mk, ai + p));
            prefetch_row_ahead(b0 + p);
            prefetch_row_ahead(b1 + p);
            prefetch_row_ahead(b2 + p);
            prefetch_row_ahead(b3 + p);
            acc[0] = _mm512_dpbf16_ps(acc[0], x, as_bh(_mm512_maskz_loadu_epi16(mk, b0 + p)));
            acc[1] = _mm512_dpbf16_ps(acc[1], x, as_bh(_mm512_maskz_loadu_epi16(mk, b1 + p)));
            acc[2] = _mm512_dpbf16_ps(acc[2], x, as_bh(_mm512_maskz_loadu_epi16(mk, b2 + p)));
            acc[3] = _mm512_dpbf16_ps(acc[3], x, as_bh(_mm512_maskz_loadu_epi16(mk, b3 + p)));
        }
        for (int j = 0; j < cols; j++) {
            float r = alpha * _mm512_reduce_add_ps(acc[j]), *cij = c + i * ldc + j;
            *cij = beta == 0.0f ? r : r + beta * *cij;
        }
    }
}

const gemm_kernel cf_gemm_kernel_bf16_avx512bf16 = {
    .name = "avx512bf16", .mr = MR, .nr = NR, .k_group = 2, .elem_bytes = 2, .macs_per_cycle = 16,
    .pack_a = cf_gemm_pack_a_bf16_pairs, .pack_b = cf_gemm_pack_b_bf16_pairs, .tile = tile};
