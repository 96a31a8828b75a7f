/* The row kernels of exp_rows.h for AVX2 + FMA: 8 lanes, the last partial vector
 * loaded and stored under a mask and left out of the sums. */
#include <immintrin.h>
#include <math.h>

#include "kernels/exp_rows.h"
#include "kernels/simd_exp.h"

enum { LANES = 8 };

/* All ones in the lanes below n (of the vector starting at the current element). */
static inline __m256i first_lanes(long n) {
    int k = n >= LANES ? LANES : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Lanes reduced in a fixed order: 4 + 4, 2 + 2, 1 + 1. */
static inline float reduce(__m256 v, __m128 (*op)(__m128, __m128)) {
    __m128 h = op(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = op(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(op(h, _mm_movehdup_ps(h)));
}

static __m128 add4(__m128 a, __m128 b) { return _mm_add_ps(a, b); }
static __m128 max4(__m128 a, __m128 b) { return _mm_max_ps(a, b); }

static float row_max(const float *x, long n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    for (long i = 0; i < n; i += LANES) {
        __m256i k = first_lanes(n - i);
        __m256 v = _mm256_blendv_ps(m, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));
        m = _mm256_max_ps(m, v);
    }
    return reduce(m, max4);
}

/* See exp_rows_table.h. */
static inline __attribute__((always_inline)) float exp_pass(const float *x, float *y, long n, float scale,
                                                            float shift, float mul) {
    __m256 sum = _mm256_setzero_ps(), vscale = _mm256_set1_ps(scale), vshift = _mm256_set1_ps(shift);
    for (long i = 0; i < n; i += LANES) {
        __m256i k = first_lanes(n - i);
        __m256 e = cf_exp_avx2(_mm256_fmsub_ps(_mm256_maskload_ps(x + i, k), vscale, vshift));
        sum = _mm256_add_ps(sum, _mm256_and_ps(e, _mm256_castsi256_ps(k)));
        if (y) _mm256_maskstore_ps(y + i, k, _mm256_mul_ps(e, _mm256_set1_ps(mul)));
    }
    return reduce(sum, add4);
}

static void sigmoid(const float *x, float *y, long n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (long i = 0; i < n; i += LANES) {
        __m256i k = first_lanes(n - i);
        __m256 e = cf_exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_maskload_ps(x + i, k)));
        _mm256_maskstore_ps(y + i, k, _mm256_div_ps(one, _mm256_add_ps(one, e)));
    }
}

#include "kernels/exp_rows_table.h"

const cf_exp_rows cf_exp_rows_avx2 = CF_EXP_ROWS_TABLE;
