/* AVX-512 BF16 kernel: vdpbf16ps multiplies pairs of bf16 values and adds both products
 * to an f32 lane, so A and B are packed as pairs of consecutive k values. A 12 x 32
 * tile: 24 zmm accumulators, per k pair two B loads and twelve 32-bit broadcasts of A.
 * Reached only when cf_has_avx512_bf16(). */
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

GEMM_INLINE void tile_body(const int m, long k, const uint32_t *a, const uint32_t *b, float *c, long ldc, int n,
                      float alpha, float beta) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    long pairs = (k + 1) / 2;
    for (long q = 0; q < pairs; q++) {
        __m512bh b0 = as_bh(_mm512_loadu_si512(b)), b1 = as_bh(_mm512_loadu_si512(b + 16));
#pragma GCC unroll 12
        for (int i = 0; i < m; i++) {
            __m512bh ai = as_bh(_mm512_set1_epi32((int)a[i]));
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
        a += MR;
        b += NR;
    }
    store_tile_rows(m, acc, c, ldc, n, alpha, beta);
}

#define TILE_VARIANTS(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)
#define PACKED_TILE(M)                                                                                                \
    static void tile_##M(long k, const void *a, const void *b, float *c, long ldc, int n, float alpha, float beta) { \
        tile_body(M, k, a, b, c, ldc, n, alpha, beta);                                                             \
    }
TILE_VARIANTS(PACKED_TILE)

typedef void (*tile_fn)(long, const void *, const void *, float *, long, int, float, float);
#define LIST_TILE(M) tile_##M,
static const tile_fn tiles[MR] = {TILE_VARIANTS(LIST_TILE)};

static void tile(long k, const void *a, const void *b, float *c, long ldc, int m, int n, float alpha, float beta) {
    tiles[m - 1](k, a, b, c, ldc, n, alpha, beta);
}

const gemm_kernel cf_gemm_kernel_bf16_avx512bf16 = {
    .name = "avx512bf16", .mr = MR, .nr = NR, .k_group = 2, .elem_bytes = 2,
    .pack_a = cf_gemm_pack_a_bf16_pairs, .pack_b = cf_gemm_pack_b_bf16_pairs, .tile = tile};
