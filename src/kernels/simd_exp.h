/* Internal: exp(x) on a vector of floats, for the kernels compiled per ISA (include
 * from *_avx512.c for cf_exp_avx512, from *_avx2.c for cf_exp_avx2; a file compiled for
 * neither gets nothing and keeps expf).
 *
 * Cephes' expf: x = n ln2 + r with n = round(x / ln2), |r| <= ln2/2 (ln2 split in two
 * parts so r is exact), exp(r) by a degree-6 polynomial, then times 2^n. Measured
 * against double exp over [-104, 89] (tests/test_simd_exp.c): at most 1.24 ulp away
 * for normal results, both versions (expf: 0.5).
 * Edge cases as expf, except the gradual underflow: x below ln(FLT_MIN) = -87.34 gives
 * exactly 0 (never a denormal, which would slow every later operation on it);
 * x above ln(FLT_MAX) = 88.72 and +inf give +inf, -inf gives 0, NaN stays NaN. */
#ifndef CFORMERS_SIMD_EXP_H
#define CFORMERS_SIMD_EXP_H

#include <immintrin.h>

#define CF_EXP_LOG2E 1.44269504088896341f
#define CF_EXP_LN2_HI 0.693359375f      /* ln2 = LN2_HI + LN2_LO, LN2_HI exact in few bits */
#define CF_EXP_LN2_LO -2.12194440e-4f
#define CF_EXP_MAX_ARG 88.8f            /* above ln(FLT_MAX): n = 128, the result overflows to +inf */
#define CF_EXP_MIN_ARG -87.33654475f    /* ln(FLT_MIN): below it, 0 */

/* The polynomial's coefficients, highest degree first: exp(r) ~ 1 + r + r^2 P(r). */
#define CF_EXP_P0 1.9875691500e-4f
#define CF_EXP_P1 1.3981999507e-3f
#define CF_EXP_P2 8.3334519073e-3f
#define CF_EXP_P3 4.1665795894e-2f
#define CF_EXP_P4 1.6666665459e-1f
#define CF_EXP_P5 5.0000001201e-1f

/* p = exp(r) for r = x - n ln2, with the intrinsics of one vector width (type T,
 * intrinsic prefix V: __m512, _mm512 or __m256, _mm256), so both widths run the same
 * arithmetic. */
#define CF_EXP_REDUCED(T, V, x, n, p)                                                                                  \
    do {                                                                                                               \
        T r_ = V##_fnmadd_ps(n, V##_set1_ps(CF_EXP_LN2_HI), x);                                                        \
        r_ = V##_fnmadd_ps(n, V##_set1_ps(CF_EXP_LN2_LO), r_);                                                         \
        p = V##_set1_ps(CF_EXP_P0);                                                                                    \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(CF_EXP_P1));                                                               \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(CF_EXP_P2));                                                               \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(CF_EXP_P3));                                                               \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(CF_EXP_P4));                                                               \
        p = V##_fmadd_ps(p, r_, V##_set1_ps(CF_EXP_P5));                                                               \
        p = V##_fmadd_ps(p, V##_mul_ps(r_, r_), V##_add_ps(r_, V##_set1_ps(1.0f)));                                    \
    } while (0)

#ifdef __AVX512F__
static inline __m512 cf_exp_avx512(__m512 x) {
    __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(CF_EXP_MIN_ARG), _CMP_LT_OQ);
    /* x as the second operand of min/max, so NaN passes through. */
    x = _mm512_max_ps(_mm512_set1_ps(CF_EXP_MIN_ARG), _mm512_min_ps(_mm512_set1_ps(CF_EXP_MAX_ARG), x));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(CF_EXP_LOG2E)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 p;
    CF_EXP_REDUCED(__m512, _mm512, x, n, p);
    return _mm512_maskz_scalef_ps((__mmask16)~underflow, p, n);
}
#endif

#if defined(__AVX2__) && defined(__FMA__)
/* p 2^n for the integral n of cf_exp_avx2 (-126 .. 128), as p 2^(n/2) 2^(n - n/2): each
 * factor is a normal float (2^128 alone is not), so the result overflows to inf only
 * where it should. */
static inline __m256 cf_exp_avx2_scale(__m256 p, __m256 n) {
    __m256i ni = _mm256_cvtps_epi32(n), half = _mm256_srai_epi32(ni, 1), bias = _mm256_set1_epi32(127);
    __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    __m256 b = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, a), b);
}

static inline __m256 cf_exp_avx2(__m256 x) {
    __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(CF_EXP_MIN_ARG), _CMP_LT_OQ);
    x = _mm256_max_ps(_mm256_set1_ps(CF_EXP_MIN_ARG), _mm256_min_ps(_mm256_set1_ps(CF_EXP_MAX_ARG), x));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(CF_EXP_LOG2E)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 p;
    CF_EXP_REDUCED(__m256, _mm256, x, n, p);
    return _mm256_andnot_ps(underflow, cf_exp_avx2_scale(p, n));
}
#endif

#endif
