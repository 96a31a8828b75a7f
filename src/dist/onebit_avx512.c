/* 1-bit packing with AVX-512: 16 signs a compare, stored as the mask's two bytes (the
 * portable kernel's layout). The scale is summed in double, in another order than the
 * portable kernel's, so the two can differ in its last bit; every rank unpacks the same
 * bytes either way, so the ranks still agree. */
#include <immintrin.h>
#include <string.h>

#include "dist/onebit.h"

void cf_onebit_pack_avx512(const float *x, float *e, int64_t n, unsigned char *out) {
    const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    __m512d sum_lo = _mm512_setzero_pd(), sum_hi = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_and_ps(_mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(e + i)), abs_mask);
        sum_lo = _mm512_add_pd(sum_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
        sum_hi = _mm512_add_pd(sum_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))));
    }
    double sum = _mm512_reduce_add_pd(_mm512_add_pd(sum_lo, sum_hi)) + cf_onebit_abs_sum(x, e, i, n);
    float scale = (float)(sum / (double)n);
    memcpy(out, &scale, sizeof scale);
    unsigned char *bits = out + sizeof scale;
    memset(bits, 0, CF_ONEBIT_CHUNK / 8); /* the whole slot, sent as it is */
    const __m512 pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale);
    for (i = 0; i + 16 <= n; i += 16) {
        __m512 v = _mm512_add_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(e + i));
        __mmask16 positive = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
        _mm512_storeu_ps(e + i, _mm512_sub_ps(v, _mm512_mask_blend_ps(positive, neg, pos)));
        memcpy(bits + i / 8, &positive, 2);
    }
    cf_onebit_signs(x, e, i, n, scale, bits);
}

void cf_onebit_unpack_avx512(const unsigned char *in, int64_t n, float *y, bool add) {
    float scale;
    memcpy(&scale, in, sizeof scale);
    const unsigned char *bits = in + sizeof scale;
    const __m512 pos = _mm512_set1_ps(scale), neg = _mm512_set1_ps(-scale);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __mmask16 m;
        memcpy(&m, bits + i / 8, 2);
        __m512 v = _mm512_mask_blend_ps(m, neg, pos);
        _mm512_storeu_ps(y + i, add ? _mm512_add_ps(_mm512_loadu_ps(y + i), v) : v);
    }
    cf_onebit_expand(bits, i, n, scale, y, add);
}
