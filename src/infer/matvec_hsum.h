/* The sum of a 256-bit vector's eight floats, for the AVX2-level decode kernels (include
 * after <immintrin.h>, in a file compiled for AVX). */
#ifndef CFORMERS_INFER_MATVEC_HSUM_H
#define CFORMERS_INFER_MATVEC_HSUM_H

static inline float matvec_hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
