#include <immintrin.h>

#include "infer/matvec.h"

enum { ROWS = MATVEC_ROWS, BLOCK = MATVEC_PAIR_BLOCK_AVX512 };

/* A group of ROWS rows at a time (see matvec.h), storing only the valid ones. */
void cf_matvec_f32_rows_avx512(const void *wv, const void *xv, float *y, long r0, long r1, long in) {
    const float *w = wv, *x = xv;
    long dist = matvec_ahead_rows(in * (long)sizeof(float));
    MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    for (long r = r0; r < r1; r += ROWS) {
        const float *row[ROWS], *ahead[ROWS];
        MATVEC_GROUP_ROWS(row, ahead, w, r, r1, in, dist)
        __m512 acc[ROWS];
        for (int k = 0; k < ROWS; k++) acc[k] = _mm512_setzero_ps();
        for (long i = 0; i < in; i += 16) {
            __mmask16 m = in - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (in - i)) - 1);
            __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
            for (int k = 0; k < ROWS; k++) {
                _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1);
                acc[k] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, row[k] + i), xv, acc[k]);
            }
        }
        for (int k = 0; k < ROWS && r + k < r1; k++) y[r + k] = _mm512_reduce_add_ps(acc[k]);
    }
}

/* 32 bf16 weights per load: the even ones become f32 by a shift, the odd ones by
 * clearing their low half, each multiplied by the matching half of the x_pairs block. */
void cf_matvec_bf16_rows_avx512(const void *wv, const void *xv, float *y, long r0, long r1, long in) {
    const cf_bf16 *w = wv;
    const float *x_pairs = xv;
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    long dist = matvec_ahead_rows(in * (long)sizeof(cf_bf16));
    MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    for (long r = r0; r < r1; r += ROWS) {
        const cf_bf16 *row[ROWS], *ahead[ROWS];
        MATVEC_GROUP_ROWS(row, ahead, w, r, r1, in, dist)
        __m512 even[ROWS], odd[ROWS];
        for (int k = 0; k < ROWS; k++) even[k] = odd[k] = _mm512_setzero_ps();
        for (long i = 0; i < in; i += BLOCK) {
            __mmask32 m = in - i >= BLOCK ? (__mmask32)0xffffffffu : (__mmask32)((1u << (in - i)) - 1);
            __m512 xe = _mm512_loadu_ps(x_pairs + i), xo = _mm512_loadu_ps(x_pairs + i + BLOCK / 2);
            for (int k = 0; k < ROWS; k++) {
                _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1);
                __m512i v = _mm512_maskz_loadu_epi16(m, row[k] + i);
                even[k] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), xe, even[k]);
                odd[k] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, high)), xo, odd[k]);
            }
        }
        for (int k = 0; k < ROWS && r + k < r1; k++) y[r + k] = _mm512_reduce_add_ps(_mm512_add_ps(even[k], odd[k]));
    }
}
