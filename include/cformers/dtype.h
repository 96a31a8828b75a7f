/* Element types and conversions. bf16 and f16 are stored as uint16_t bit patterns;
 * conversions to them round to nearest even, as hardware does. */
#ifndef CFORMERS_DTYPE_H
#define CFORMERS_DTYPE_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
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
    CF_Q8_0 = 5, /* GGUF's q8_0: blocks of 32 weights, each an f16 scale d and 32 int8 q (w = d * q) */
    CF_Q4_0 = 6, /* GGUF's q4_0: blocks of 32 weights, each an f16 scale d and 32 4-bit q (w = d * (q - 8)) */
    CF_DTYPE_COUNT
} cf_dtype;

typedef uint16_t cf_bf16;
typedef uint16_t cf_f16;

/* Bytes per element; 0 for the block types q8_0 and q4_0 (see cf_dtype_row_bytes). */
size_t cf_dtype_size(cf_dtype t);
/* Bytes of one row of `cols` elements (the innermost dim): cols * cf_dtype_size, or for
 * q8_0 ceil(cols / 32) blocks of 34 bytes (q4_0: 18), the last one zero-padded (GGUF
 * requires whole blocks; cformers pads rows such as stories260K's 172-wide down projection). */
size_t cf_dtype_row_bytes(cf_dtype t, int64_t cols);
/* Bytes of a tensor of this shape (rows of the innermost dim). The caller has checked that
 * the element count fits (it is at most 2^40 in checkpoints and GGUF files). */
uint64_t cf_dtype_tensor_bytes(cf_dtype t, int ndim, const int64_t *shape);
/* True for the block types, q8_0 and q4_0 (their cf_dtype_size is 0). */
bool cf_dtype_is_blocks(cf_dtype t);
/* "f32", "bf16", "f16", "i8", "i32", "q8_0", "q4_0". */
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

/* q8_0 blocks as GGUF (ggml's block_q8_0) lays them out: 34 bytes, no padding. */
enum { CF_Q8_0_BLOCK = 32, CF_Q8_0_BLOCK_BYTES = 34 };
typedef struct cf_block_q8_0 {
    cf_f16 d;
    int8_t q[CF_Q8_0_BLOCK];
} cf_block_q8_0;

/* rows x cols floats into rows of q8_0 blocks (cf_dtype_row_bytes apart), by ggml's
 * reference rule: d = max|x| / 127, q = roundf(x / d) (x * (1/d) with the f32 d), d stored
 * as f16. Dequantization is w = f16(d) * q; a padded block's tail is not written back. */
void cf_quantize_q8_0(const float *src, void *dst, int64_t rows, int64_t cols);
void cf_dequantize_q8_0(const void *src, float *dst, int64_t rows, int64_t cols);

/* q4_0 blocks (ggml's block_q4_0): 18 bytes; element j < 16 is the low nibble of qs[j],
 * element j + 16 its high nibble, w = d * (nibble - 8). */
enum { CF_Q4_0_BLOCK_BYTES = 18 };
typedef struct cf_block_q4_0 {
    cf_f16 d;
    uint8_t qs[CF_Q8_0_BLOCK / 2];
} cf_block_q4_0;

/* rows x cols floats into rows of q4_0 blocks, by ggml's reference rule (quantize_row_q4_0_ref):
 * m the element of largest magnitude (the first such), d = m / -8, q = min(15, trunc(x / d + 8.5))
 * (x * (1/d) with the f32 d); non-finite inputs give defined nibbles. Padding quantizes as 0. */
void cf_quantize_q4_0(const float *src, void *dst, int64_t rows, int64_t cols);
void cf_dequantize_q4_0(const void *src, float *dst, int64_t rows, int64_t cols);
/* q4_0 into q8_0 blocks holding the same values (the same d, q - 8), rows x cols. */
void cf_q4_0_to_q8_0(const void *src, void *dst, int64_t rows, int64_t cols);
/* Nibble j (< 32) of a q4_0 block's 16 bytes qs: element j < 16 is the low nibble of qs[j],
 * element j + 16 its high nibble (q5_0 and q4_1 keep theirs the same way). */
static inline int cf_q4_nibble(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4; }

/* rows x cols of dtype t (f32, bf16, f16, q8_0 or q4_0, rows of whole blocks) as f32. */
void cf_dtype_to_f32(cf_dtype t, const void *src, float *dst, int64_t rows, int64_t cols);
/* rows x cols floats into rows of blocks of the block type t (q8_0 or q4_0). */
void cf_quantize_blocks(cf_dtype t, const float *src, void *dst, int64_t rows, int64_t cols);

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
CF_API_END
#endif
