/* Element types and conversions. bf16 and f16 are stored as uint16_t bit patterns;
 * conversions to them round to nearest even, as hardware does. */
#ifndef CFORMERS_DTYPE_H
#define CFORMERS_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cf_dtype {
    CF_F32 = 0,
    CF_BF16 = 1,
    CF_F16 = 2,
    CF_I8 = 3,
    CF_I32 = 4,
    CF_DTYPE_COUNT
} cf_dtype;

typedef uint16_t cf_bf16;
typedef uint16_t cf_f16;

/* Bytes per element. */
size_t cf_dtype_size(cf_dtype t);
/* "f32", "bf16", "f16", "i8", "i32". */
const char *cf_dtype_name(cf_dtype t);
/* Accepts the names above and the MindFormers spellings ("float32", "bfloat16", "float16",
 * "int8", "int32"); returns -1 for anything else. */
int cf_dtype_parse(const char *name, cf_dtype *out);

static inline float cf_bf16_to_f32(cf_bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline cf_bf16 cf_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (cf_bf16)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (cf_bf16)(u >> 16);
}

float cf_f16_to_f32(cf_f16 h);
cf_f16 cf_f32_to_f16(float f);

/* Bulk conversions (vectorised where the CPU allows). */
void cf_convert_f32_to_bf16(const float *src, cf_bf16 *dst, size_t n);
void cf_convert_bf16_to_f32(const cf_bf16 *src, float *dst, size_t n);
void cf_convert_f32_to_f16(const float *src, cf_f16 *dst, size_t n);
void cf_convert_f16_to_f32(const cf_f16 *src, float *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif
