/* The AVX-512 decode kernels of matvec_avx512.c for several inputs at once (a batched
 * step): a tile of R weight rows by N inputs, so each weight load (and bf16 widening)
 * serves N inputs and each load of x serves R rows. Each output is accumulated and reduced
 * exactly as the one-input kernel does it (one 16-lane sum over `in`, bf16 as an even and
 * an odd sum added before the reduce), so the results are bit-identical to it whatever N
 * and R are. The tile sizes keep accumulators, x and the widened weights in the 32 zmm
 * registers. */
#include <immintrin.h>

#include "infer/matvec.h"

enum { LANES = 16, BLOCK = MATVEC_PAIR_BLOCK_AVX512 };

/* matvec_batch_tile.h's vocabulary for 16-lane vectors: partial vectors by masked loads. */
#define VEC __m512
#define VECI __m512i
#define VECI_SET1 _mm512_set1_epi32
#define VEC_ZERO _mm512_setzero_ps
#define VEC_FMA _mm512_fmadd_ps
#define VEC_LOADU _mm512_loadu_ps
#define F32_END(in) (in)
#define BF16_END(in) (in)
#define F32_LOAD(p, left) _mm512_maskz_loadu_ps((left) >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (left)) - 1), p)
#define BF16_LOAD(p, left)                                                                                             \
    _mm512_maskz_loadu_epi16((left) >= BLOCK ? (__mmask32)0xffffffffu : (__mmask32)((1u << (left)) - 1), p)
#define BF16_WIDEN(v, high, even, odd)                                                                                 \
    do {                                                                                                               \
        __m512i v_ = (v);                                                                                              \
        (even) = _mm512_castsi512_ps(_mm512_slli_epi32(v_, 16)), (odd) = _mm512_castsi512_ps(_mm512_and_si512(v_, high)); \
    } while (0)
static inline float f32_finish(__m512 acc, const float *row, const float *x, long in) {
    (void)row, (void)x, (void)in;
    return _mm512_reduce_add_ps(acc);
}
static inline float bf16_finish(__m512 even, __m512 odd, const cf_bf16 *row, const float *pairs, long in) {
    (void)row, (void)pairs, (void)in;
    return _mm512_reduce_add_ps(_mm512_add_ps(even, odd));
}

/* v held in a register from here: without it gcc reads x from memory again in every
 * multiply-add (a load per FMA, for R rows R loads of each x), and the loads, not the
 * multiply-adds, bound the kernel. */
#define TILE_IN_REGISTER(v) __asm__("" : "+v"(v))

/* matvec_batch_tile.h defines f32_rows<N> and bf16_rows<N> (matvec_rowsn_fn) for tiles of
 * TILE_R rows by TILE_N inputs: the arrays of accumulators have exactly the tile's size, so
 * the compiler keeps them in registers (gcc leaves an array over 18 zmm in memory). */
/* f32: R x N accumulators, N inputs and a weight vector; bf16: twice the accumulators and
 * the inputs (even and odd halves) and two weight vectors, so 4 inputs are its widest tile
 * (5 spill). Measured in cache on one thread of the loaded 2-core EPYC, G multiply-adds per
 * CPU second, 16 inputs (bench_matvec --batch 16): f32 33 with 2-input tiles, 43 with 4-8;
 * bf16 28-30 with 2, 33-35 with 4. */
#define TILE_N 2
#define TILE_R_F32 4
#define TILE_R_BF16 4
#include "infer/matvec_batch_tile.h"
#define TILE_N 3
#define TILE_R_F32 4
#define TILE_R_BF16 3
#include "infer/matvec_batch_tile.h"
#define TILE_N 4
#define TILE_R_F32 4
#define TILE_R_BF16 2
#include "infer/matvec_batch_tile.h"
#define TILE_N 5
#define TILE_R_F32 3
#include "infer/matvec_batch_tile.h"
#define TILE_N 6
#define TILE_R_F32 3
#include "infer/matvec_batch_tile.h"
#define TILE_N 7
#define TILE_R_F32 2
#include "infer/matvec_batch_tile.h"
#define TILE_N 8
#define TILE_R_F32 2
#include "infer/matvec_batch_tile.h"

const matvec_rowsn_fn cf_matvec_f32_rowsn_avx512[MATVEC_BATCH_MAX + 1] = {
    NULL, NULL, f32_rows2, f32_rows3, f32_rows4, f32_rows5, f32_rows6, f32_rows7, f32_rows8};
const matvec_rowsn_fn cf_matvec_bf16_rowsn_avx512[MATVEC_BATCH_MAX + 1] = {NULL, NULL, bf16_rows2, bf16_rows3, bf16_rows4};
