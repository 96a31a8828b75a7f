/* Helpers shared by the files compiled for AVX-512 (include only from those). */
#ifndef CFORMERS_GEMM_AVX512_INLINE_H
#define CFORMERS_GEMM_AVX512_INLINE_H

#include <immintrin.h>

#define GEMM_INLINE static inline __attribute__((always_inline))

/* The first n lanes (n clamped to 0..16). */
GEMM_INLINE __mmask16 lanes16(long n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

GEMM_INLINE __mmask32 lanes32(long n) {
    return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

/* Writes alpha * acc (+ beta * C; C unread when beta == 0) to the m x n corner of a
 * 32-column tile of C, under masks. */
GEMM_INLINE void store_tile_rows(const int m, __m512 acc[][2], float *c, long ldc, int n, float alpha, float beta) {
    __mmask16 k0 = lanes16(n), k1 = lanes16(n - 16);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        __m512 r0 = _mm512_mul_ps(va, acc[i][0]), r1 = _mm512_mul_ps(va, acc[i][1]);
        if (beta != 0.0f) {
            r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k0, ci), r0);
            r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k1, ci + 16), r1);
        }
        _mm512_mask_storeu_ps(ci, k0, r0);
        _mm512_mask_storeu_ps(ci + 16, k1, r1);
    }
}

#endif
