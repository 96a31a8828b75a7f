/* Internal: what the register-blocked AVX-512 tile products (f32 FMA and bf16
 * vdpbf16ps) share: a block of C of up to ROWS rows x MAX_VECS vectors held in zmm
 * accumulators, loaded (or zeroed) before the k loop and stored after it, and the walk
 * of C in such blocks. Include only from files compiled for AVX-512. */
#ifndef CFORMERS_FLASH_ATTENTION_BLOCK_AVX512_H
#define CFORMERS_FLASH_ATTENTION_BLOCK_AVX512_H

#include <immintrin.h>
#include <stdbool.h>

enum { ROWS = 4, MAX_VECS = 4, LANES = 16 };

#define INLINE static inline __attribute__((always_inline))
/* Unrolled before scalar replacement, so the accumulator arrays become registers. */
#define UNROLL _Pragma("GCC unroll 4")

INLINE __mmask16 lane_mask(int v, int vecs, __mmask16 tail) { return v == vecs - 1 ? tail : (__mmask16)0xFFFF; }

/* c = the block of C (accumulate) or zeros; rows and vecs are constants after inlining. */
INLINE void block_load(int rows, int vecs, __m512 c[ROWS][MAX_VECS], const float *C, long ldc, __mmask16 tail,
                       bool accumulate) {
    UNROLL for (int r = 0; r < rows; r++)
        UNROLL for (int v = 0; v < vecs; v++)
            c[r][v] = accumulate ? _mm512_maskz_loadu_ps(lane_mask(v, vecs, tail), C + r * ldc + v * LANES)
                                 : _mm512_setzero_ps();
}

INLINE void block_store(int rows, int vecs, __m512 c[ROWS][MAX_VECS], float *C, long ldc, __mmask16 tail) {
    UNROLL for (int r = 0; r < rows; r++)
        UNROLL for (int v = 0; v < vecs; v++)
            _mm512_mask_storeu_ps(C + r * ldc + v * LANES, lane_mask(v, vecs, tail), c[r][v]);
}

/* Walks C [M x N] in blocks of ROWS (then single) rows x up to MAX_VECS vectors:
 * BLOCK_4(i, j, vecs, tail) and BLOCK_1(...) are the calls for one block at row i,
 * column j. */
#define FOR_EACH_BLOCK(M, N, BLOCK_4, BLOCK_1)                                                                         \
    for (long j = 0; j < (N); j += MAX_VECS * LANES) {                                                                 \
        long n = (N)-j < MAX_VECS * LANES ? (N)-j : MAX_VECS * LANES;                                                  \
        int vecs = (int)((n + LANES - 1) / LANES);                                                                     \
        __mmask16 tail = (__mmask16)(0xFFFFu >> (vecs * LANES - n));                                                   \
        long i = 0;                                                                                                    \
        for (; i + ROWS <= (M); i += ROWS) BLOCK_4;                                                                    \
        for (; i < (M); i++) BLOCK_1;                                                                                  \
    }

#endif
