/* f16 <-> f32 bulk conversions with F16C (vcvtph2ps / vcvtps2ph, round to nearest even),
 * 8 elements at a time; the scalar conversions of dtype.c do the tail. Callers
 * reach them through the AVX2 and AVX-512 kernel contexts (F16C comes with both). */
#include <immintrin.h>

#include "core/dtype_convert.h"

void cf_convert_f32_to_f16_avx2(const float *src, cf_f16 *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = cf_f32_to_f16(src[i]);
}

void cf_convert_f16_to_f32_avx2(const cf_f16 *src, float *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = cf_f16_to_f32(src[i]);
}
