#include "cformers/dtype.h"

#include <math.h>

#include "core/dtype_convert.h"
#include "kernels/context/context.h"

/* Per dtype: names, bytes per element, and for the block types (GGUF's blocks of 32 weights
 * with an f16 scale) bytes per block instead. */
static const struct {
    const char *name, *alias;
    size_t size, block_bytes;
} dtype_table[CF_DTYPE_COUNT] = {
    [CF_F32] = {"f32", "float32", 4, 0},
    [CF_BF16] = {"bf16", "bfloat16", 2, 0},
    [CF_F16] = {"f16", "float16", 2, 0},
    [CF_I8] = {"i8", "int8", 1, 0},
    [CF_I32] = {"i32", "int32", 4, 0},
    [CF_Q8_0] = {"q8_0", "Q8_0", 0, CF_Q8_0_BLOCK_BYTES},
    [CF_Q4_0] = {"q4_0", "Q4_0", 0, CF_Q4_0_BLOCK_BYTES},
};

_Static_assert(sizeof(cf_block_q8_0) == CF_Q8_0_BLOCK_BYTES, "q8_0 blocks are 34 packed bytes");
_Static_assert(sizeof(cf_block_q4_0) == CF_Q4_0_BLOCK_BYTES, "q4_0 blocks are 18 packed bytes");
_Static_assert(CF_DTYPE_COUNT == 7, "a new dtype needs its row in dtype_table (and, for a block type, "
                                    "cf_dtype_to_f32 and cf_quantize_blocks)");

bool cf_dtype_is_blocks(cf_dtype t) { return t < CF_DTYPE_COUNT && dtype_table[t].block_bytes != 0; }

size_t cf_dtype_row_bytes(cf_dtype t, int64_t cols) {
    if (cf_dtype_is_blocks(t)) return (size_t)((cols + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK) * dtype_table[t].block_bytes;
    return (size_t)cols * cf_dtype_size(t);
}

/* Elements of block b in a row of `cols` (the last one may be short). */
static int block_len(int64_t cols, int64_t b) {
    return cols - b * CF_Q8_0_BLOCK < CF_Q8_0_BLOCK ? (int)(cols - b * CF_Q8_0_BLOCK) : CF_Q8_0_BLOCK;
}

uint64_t cf_dtype_tensor_bytes(cf_dtype t, int ndim, const int64_t *shape) {
    uint64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= (uint64_t)shape[d];
    int64_t cols = ndim > 0 ? shape[ndim - 1] : 1;
    return cols > 0 ? numel / (uint64_t)cols * cf_dtype_row_bytes(t, cols) : 0;
}

void cf_quantize_q8_0(const float *src, void *dst, int64_t rows, int64_t cols) {
    int64_t blocks = (cols + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    cf_block_q8_0 *out = dst;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < blocks; b++, out++) {
            const float *x = src + r * cols + b * CF_Q8_0_BLOCK;
            int n = block_len(cols, b);
            float amax = 0.0f;
            for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            out->d = cf_f32_to_f16(d);
            /* the clamp changes nothing for finite blocks; non-finite ones (a diverged model) get
             * defined quants instead of an out-of-range conversion */
            for (int i = 0; i < CF_Q8_0_BLOCK; i++)
                out->q[i] = i < n ? (int8_t)roundf(fmaxf(-127.0f, fminf(127.0f, x[i] * id))) : 0;
        }
}

void cf_dequantize_q8_0(const void *src, float *dst, int64_t rows, int64_t cols) {
    int64_t blocks = (cols + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    const cf_block_q8_0 *in = src;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < blocks; b++, in++) {
            float d = cf_f16_to_f32(in->d), *y = dst + r * cols + b * CF_Q8_0_BLOCK;
            int n = block_len(cols, b);
            for (int i = 0; i < n; i++) y[i] = d * (float)in->q[i];
        }
}

void cf_quantize_q4_0(const float *src, void *dst, int64_t rows, int64_t cols) {
    int64_t blocks = (cols + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    cf_block_q4_0 *out = dst;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < blocks; b++, out++) {
            const float *x = src + r * cols + b * CF_Q8_0_BLOCK;
            int n = block_len(cols, b);
            float amax = 0.0f, max = 0.0f;
            for (int i = 0; i < n; i++)
                if (amax < fabsf(x[i])) amax = fabsf(x[i]), max = x[i];
            float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            out->d = cf_f32_to_f16(d);
            uint8_t q[CF_Q8_0_BLOCK];
            for (int i = 0; i < CF_Q8_0_BLOCK; i++) /* [0.5, 16.5] for finite blocks: ggml's (int8_t) cast then min */
                q[i] = i < n ? (uint8_t)fmaxf(0.0f, fminf(15.0f, x[i] * id + 8.5f)) : 8;
            for (int i = 0; i < CF_Q8_0_BLOCK / 2; i++) out->qs[i] = (uint8_t)(q[i] | q[i + CF_Q8_0_BLOCK / 2] << 4);
        }
}

/* Nibble j of a q4_0 block, minus 8. */
static int q4_0_value(const cf_block_q4_0 *b, int j) { return cf_q4_nibble(b->qs, j) - 8; }

void cf_dequantize_q4_0(const void *src, float *dst, int64_t rows, int64_t cols) {
    int64_t blocks = (cols + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    const cf_block_q4_0 *in = src;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < blocks; b++, in++) {
            float d = cf_f16_to_f32(in->d), *y = dst + r * cols + b * CF_Q8_0_BLOCK;
            int n = block_len(cols, b);
            for (int i = 0; i < n; i++) y[i] = (float)q4_0_value(in, i) * d;
        }
}

void cf_q4_0_to_q8_0(const void *src, void *dst, int64_t rows, int64_t cols) {
    int64_t blocks = rows * ((cols + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK);
    const cf_block_q4_0 *in = src;
    cf_block_q8_0 *out = dst;
    for (int64_t b = 0; b < blocks; b++) {
        out[b].d = in[b].d;
        for (int i = 0; i < CF_Q8_0_BLOCK; i++) out[b].q[i] = (int8_t)q4_0_value(&in[b], i);
    }
}

void cf_dtype_to_f32(cf_dtype t, const void *src, float *dst, int64_t rows, int64_t cols) {
    size_t n = (size_t)(rows * cols);
    switch (t) {
    case CF_BF16: cf_convert_bf16_to_f32(src, dst, n); break;
    case CF_F16: cf_convert_f16_to_f32(src, dst, n); break;
    case CF_Q8_0: cf_dequantize_q8_0(src, dst, rows, cols); break;
    case CF_Q4_0: cf_dequantize_q4_0(src, dst, rows, cols); break;
    case CF_F32:
    case CF_I8:
    case CF_I32:
    case CF_DTYPE_COUNT: memcpy(dst, src, n * sizeof(float)); break; /* f32 (the others: callers never pass) */
    }
}

void cf_quantize_blocks(cf_dtype t, const float *src, void *dst, int64_t rows, int64_t cols) {
    if (t == CF_Q4_0) cf_quantize_q4_0(src, dst, rows, cols);
    else cf_quantize_q8_0(src, dst, rows, cols);
}

size_t cf_dtype_size(cf_dtype t) { return t < CF_DTYPE_COUNT ? dtype_table[t].size : 0; }

const char *cf_dtype_name(cf_dtype t) { return t < CF_DTYPE_COUNT ? dtype_table[t].name : "?"; }

int cf_dtype_parse(const char *name, cf_dtype *out) {
    for (int t = 0; t < CF_DTYPE_COUNT; t++) {
        if (strcmp(name, dtype_table[t].name) == 0 || strcmp(name, dtype_table[t].alias) == 0) {
            *out = (cf_dtype)t;
            return 0;
        }
    }
    return -1;
}

float cf_f16_to_f32(cf_f16 h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t u;
    if (exp == 0) {
        if (mant == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            float f = ldexpf((float)mant, -24);
            memcpy(&u, &f, sizeof u);
            u |= sign;
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

cf_f16 cf_f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000;
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (cf_f16)(sign | 0x7e00);       /* NaN */
    if (abs >= 0x477ff000u) return (cf_f16)(sign | 0x7c00);      /* overflow to inf */
    if (abs < 0x38800000u) {                                      /* subnormal or zero */
        float a;
        memcpy(&a, &abs, sizeof a);
        return (cf_f16)(sign | (uint32_t)lrintf(a * 16777216.0f)); /* 2^24, ties to even */
    }
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xfffu + mant_odd;
    return (cf_f16)(sign | ((abs - 0x38000000u) >> 13));
}

void cf_convert_f32_to_bf16(const float *src, cf_bf16 *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = cf_f32_to_bf16(src[i]);
}

void cf_convert_bf16_to_f32(const cf_bf16 *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = cf_bf16_to_f32(src[i]);
}

void cf_convert_f32_to_f16_portable(const float *src, cf_f16 *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = cf_f32_to_f16(src[i]);
}

void cf_convert_f16_to_f32_portable(const cf_f16 *src, float *dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = cf_f16_to_f32(src[i]);
}

/* F16C where the kernel context has it (AVX2 and up); the same rounding either way. */
void cf_convert_f32_to_f16(const float *src, cf_f16 *dst, size_t n) { cf_kernels()->convert_f32_to_f16(src, dst, n); }

void cf_convert_f16_to_f32(const cf_f16 *src, float *dst, size_t n) { cf_kernels()->convert_f16_to_f32(src, dst, n); }
