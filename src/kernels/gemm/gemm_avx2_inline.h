/* Helpers shared by the files compiled for AVX2 (include only from those). */
#ifndef CFORMERS_GEMM_AVX2_INLINE_H
#define CFORMERS_GEMM_AVX2_INLINE_H

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* All-ones in the first n (clamped to 0..8) lanes, for vmaskmovps. */
INLINE __m256i lanes8(long n) {
    int c = n < 0 ? 0 : n > 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

#endif
