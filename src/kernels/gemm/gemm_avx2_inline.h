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

/* r[i] = row i of an 8 x 8 block; on return r[k] holds column k. */
INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* Each 128-bit half now holds a 4 x 4 block: rows 0-3 and 4-7 swap halves. */
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

#endif
