/* The row kernels of exp_rows.h for AVX-512: 16 lanes, the last partial vector under a
 * mask. */
#include <immintrin.h>
#include <math.h>

#include "kernels/exp_rows.h"
#include "kernels/simd_exp.h"

enum { LANES = 16 };

static inline __mmask16 first_lanes(long n) { return n >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

static float row_max(const float *x, long n) {
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (long i = 0; i < n; i += LANES) {
        __mmask16 k = first_lanes(n - i);
        m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + i));
    }
    return _mm512_reduce_max_ps(m);
}

/* See exp_rows_table.h. */
static inline __attribute__((always_inline)) float exp_pass(const float *x, float *y, long n, float scale,
                                                            float shift, float mul) {
    __m512 sum = _mm512_setzero_ps(), vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
    for (long i = 0; i < n; i += LANES) {
        __mmask16 k = first_lanes(n - i);
        __m512 e = cf_exp_avx512(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, x + i), vscale, vshift));
        sum = _mm512_mask_add_ps(sum, k, sum, e);
        if (y) _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(e, _mm512_set1_ps(mul)));
    }
    return _mm512_reduce_add_ps(sum);
}

static void sigmoid(const float *x, float *y, long n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (long i = 0; i < n; i += LANES) {
        __mmask16 k = first_lanes(n - i);
        __m512 e = cf_exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_maskz_loadu_ps(k, x + i)));
        _mm512_mask_storeu_ps(y + i, k, _mm512_div_ps(one, _mm512_add_ps(one, e)));
    }
}

#include "kernels/exp_rows_table.h"

const cf_exp_rows cf_exp_rows_avx512 = CF_EXP_ROWS_TABLE;
