/* The AVX2 decode kernels of matvec_avx2.c for several inputs at once (a batched step),
 * as matvec_batch_avx512.c does for AVX-512: tiles of R rows x N inputs (matvec_batch_tile.h),
 * each output bit-identical to the one-input kernel's (8-lane sums, the horizontal sum, then
 * the tail columns one by one). 16 ymm registers: f32 up to 4 inputs, bf16 (an even and an
 * odd accumulator per output, two x vectors per input) 2. */
#include <immintrin.h>

#include "infer/matvec.h"
#include "infer/matvec_hsum.h"

enum { LANES = 8, BLOCK = MATVEC_PAIR_BLOCK_AVX2 };

/* v held in a register (see matvec_batch_avx512.c). */
#define TILE_IN_REGISTER(v) __asm__("" : "+x"(v))

/* matvec_batch_tile.h's vocabulary for 8-lane vectors: whole vectors only, the tail columns
 * in the finish. */
#define VEC __m256
#define VECI __m256i
#define VECI_SET1 _mm256_set1_epi32
#define VEC_ZERO _mm256_setzero_ps
#define VEC_FMA _mm256_fmadd_ps
#define VEC_LOADU _mm256_loadu_ps
#define F32_END(in) ((in) - (in) % LANES)
#define BF16_END(in) ((in) - (in) % BLOCK)
#define F32_LOAD(p, left) _mm256_loadu_ps(p)
#define BF16_LOAD(p, left) _mm256_loadu_si256((const __m256i *)(p))
#define BF16_WIDEN(v, high, even, odd)                                                                                 \
    do {                                                                                                               \
        __m256i v_ = (v);                                                                                              \
        (even) = _mm256_castsi256_ps(_mm256_slli_epi32(v_, 16)), (odd) = _mm256_castsi256_ps(_mm256_and_si256(v_, high)); \
    } while (0)
static inline float f32_finish(__m256 acc, const float *row, const float *x, long in) {
    float s = matvec_hsum256(acc);
    for (long i = F32_END(in); i < in; i++) s += row[i] * x[i];
    return s;
}
static inline float bf16_finish(__m256 even, __m256 odd, const cf_bf16 *row, const float *pairs, long in) {
    float s = matvec_hsum256(_mm256_add_ps(even, odd));
    for (long i = BF16_END(in); i < in; i++) s += cf_bf16_to_f32(row[i]) * pairs[matvec_pair_index(i, BLOCK)];
    return s;
}

#define TILE_N 2
#define TILE_R_F32 4
#define TILE_R_BF16 2
#include "infer/matvec_batch_tile.h"
#define TILE_N 3
#define TILE_R_F32 3
#include "infer/matvec_batch_tile.h"
#define TILE_N 4
#define TILE_R_F32 2
#include "infer/matvec_batch_tile.h"

const matvec_rowsn_fn cf_matvec_f32_rowsn_avx2[MATVEC_BATCH_MAX + 1] = {NULL, NULL, f32_rows2, f32_rows3, f32_rows4};
const matvec_rowsn_fn cf_matvec_bf16_rowsn_avx2[MATVEC_BATCH_MAX + 1] = {NULL, NULL, bf16_rows2};
