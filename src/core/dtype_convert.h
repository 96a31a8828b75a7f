/* Internal: the f16 conversions behind cf_convert_f32_to_f16 / cf_convert_f16_to_f32,
 * the kernel context's convert_* (F16C in the AVX2 and AVX-512 contexts). */
#ifndef CFORMERS_DTYPE_CONVERT_H
#define CFORMERS_DTYPE_CONVERT_H

#include "cformers/dtype.h"

void cf_convert_f32_to_f16_portable(const float *src, cf_f16 *dst, size_t n);
void cf_convert_f16_to_f32_portable(const cf_f16 *src, float *dst, size_t n);
void cf_convert_f32_to_f16_avx2(const float *src, cf_f16 *dst, size_t n);
void cf_convert_f16_to_f32_avx2(const cf_f16 *src, float *dst, size_t n);

#endif
