/* Internal: the bf16 tile primitives of flash attention in portable C: the product with
 * each bf16 widened to f32 as it is loaded (for CPUs without vdpbf16ps) and the
 * rounding of f32 tiles into bf16 operands. Included once per ISA file, so each
 * compiles them for its own vector width. */
#ifndef CFORMERS_FLASH_ATTENTION_TILES_BF16_H
#define CFORMERS_FLASH_ATTENTION_TILES_BF16_H

#include "kernels/flash_attention.h"

/* The two bf16 halves of a packed pair. */
static inline float pair_low(uint32_t w) { return cf_bf16_to_f32((cf_bf16)(w & 0xFFFFu)); }
static inline float pair_high(uint32_t w) { return cf_bf16_to_f32((cf_bf16)(w >> 16)); }

static inline void tile_gemm_bf16(long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C,
                           long ldc, bool accumulate) {
    for (long i = 0; i < M; i++) {
        float *restrict c = C + i * ldc;
        const cf_bf16 *a = A + i * lda;
        if (!accumulate)
            for (long j = 0; j < N; j++) c[j] = 0.0f;
        for (long k = 0; k < K; k += 2) {
            const float a0 = cf_bf16_to_f32(a[k]), a1 = k + 1 < K ? cf_bf16_to_f32(a[k + 1]) : 0.0f;
            const uint32_t *restrict b = B + k / 2 * ldb;
            for (long j = 0; j < N; j++) c[j] += a0 * pair_low(b[j]) + a1 * pair_high(b[j]);
        }
    }
}

static inline void tile_pack_rows(cf_bf16 *dst, const float *x, long rows, long cols) {
    cf_convert_f32_to_bf16(x, dst, (size_t)(rows * cols));
}

static inline void tile_pack_cols(cf_bf16 *dst, const float *x, long rows, long cols) {
    long ld = rows + rows % 2;
    for (long c = 0; c < cols; c++) {
        for (long r = 0; r < rows; r++) dst[c * ld + r] = cf_f32_to_bf16(x[r * cols + c]);
        if (rows % 2) dst[c * ld + rows] = 0;
    }
}

#endif
