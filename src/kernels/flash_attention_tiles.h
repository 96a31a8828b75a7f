/* Internal: the flash-attention tile primitives in portable C, written so compilers
 * vectorise the inner loops, for the portable path (flash_attention_tiles.c; AVX2 and
 * AVX-512 have register-blocked tiles of their own). */
#ifndef CFORMERS_FLASH_ATTENTION_TILES_H
#define CFORMERS_FLASH_ATTENTION_TILES_H

#include "kernels/flash_attention.h"

static void tile_gemm(long M, long N, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb,
                      float *C, long ldc, bool accumulate) {
    for (long i = 0; i < M; i++) {
        float *restrict c = C + i * ldc;
        if (!accumulate)
            for (long j = 0; j < N; j++) c[j] = 0.0f;
        for (long k = 0; k < K; k++) {
            const float a = A[i * a_rs + k * a_cs];
            const float *restrict b = B + k * ldb;
            for (long j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}

/* P or dS rounded into a bf16 operand tile (cf_fa_tiles.pack_rows, pack_cols). */
static void tile_pack_rows(cf_bf16 *dst, const float *x, long rows, long cols) {
    cf_convert_f32_to_bf16(x, dst, (size_t)(rows * cols));
}

static void tile_pack_cols(cf_bf16 *dst, const float *x, long rows, long cols) {
    long ld = rows + rows % 2;
    for (long c = 0; c < cols; c++) {
        for (long r = 0; r < rows; r++) dst[c * ld + r] = cf_f32_to_bf16(x[r * cols + c]);
        if (rows % 2) dst[c * ld + rows] = 0;
    }
}

/* The table, with the softmax row kernels `exp_rows` (a cf_exp_rows). */
#define CF_FA_TILES_TABLE(exp_rows)                                                                                    \
    {.gemm = tile_gemm, .pack_rows = tile_pack_rows, .pack_cols = tile_pack_cols, .rows = &(exp_rows)}

#endif
