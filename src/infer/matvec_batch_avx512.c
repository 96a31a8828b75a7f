/* The AVX-512 decode kernels of matvec_avx512.c for two inputs at once (a batched step):
 * each weight load (and bf16 widening) serves both, and each output is accumulated and
 * reduced exactly as the one-input kernel does it, so the results are bit-identical. */
#include <immintrin.h>

#include "infer/matvec.h"

enum { ROWS = MATVEC_ROWS, BLOCK = MATVEC_PAIR_BLOCK_AVX512 };

void matvec_f32_rows2_avx512(const void *wv, const void *xv0, const void *xv1, float *y0, float *y1, long r0, long r1,
                             long in) {
    const float *w = wv, *x0 = xv0, *x1 = xv1;
    long dist = matvec_ahead_rows(in * (long)sizeof(float));
    MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    for (long r = r0; r < r1; r += ROWS) {
        const float *row[ROWS], *ahead[ROWS];
        MATVEC_GROUP_ROWS(row, ahead, w, r, r1, in, dist)
        __m512 a0[ROWS], a1[ROWS];
        for (int k = 0; k < ROWS; k++) a0[k] = a1[k] = _mm512_setzero_ps();
        for (long i = 0; i < in; i += 16) {
            __mmask16 m = in - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (in - i)) - 1);
            __m512 xv0 = _mm512_maskz_loadu_ps(m, x0 + i), xv1 = _mm512_maskz_loadu_ps(m, x1 + i);
            for (int k = 0; k < ROWS; k++) {
                _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1);
                __m512 wv = _mm512_maskz_loadu_ps(m, row[k] + i);
                a0[k] = _mm512_fmadd_ps(wv, xv0, a0[k]);
                a1[k] = _mm512_fmadd_ps(wv, xv1, a1[k]);
            }
        }
        for (int k = 0; k < ROWS && r + k < r1; k++)
            y0[r + k] = _mm512_reduce_add_ps(a0[k]), y1[r + k] = _mm512_reduce_add_ps(a1[k]);
    }
}

void matvec_bf16_rows2_avx512(const void *wv, const void *pv0, const void *pv1, float *y0, float *y1, long r0, long r1,
                              long in) {
    const cf_bf16 *w = wv;
    const float *p0 = pv0, *p1 = pv1;
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    long dist = matvec_ahead_rows(in * (long)sizeof(cf_bf16));
    MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    for (long r = r0; r < r1; r += ROWS) {
        const cf_bf16 *row[ROWS], *ahead[ROWS];
        MATVEC_GROUP_ROWS(row, ahead, w, r, r1, in, dist)
        __m512 e0[ROWS], o0[ROWS], e1[ROWS], o1[ROWS];
        for (int k = 0; k < ROWS; k++) e0[k] = o0[k] = e1[k] = o1[k] = _mm512_setzero_ps();
        for (long i = 0; i < in; i += BLOCK) {
            __mmask32 m = in - i >= BLOCK ? (__mmask32)0xffffffffu : (__mmask32)((1u << (in - i)) - 1);
            __m512 xe0 = _mm512_loadu_ps(p0 + i), xo0 = _mm512_loadu_ps(p0 + i + BLOCK / 2);
            __m512 xe1 = _mm512_loadu_ps(p1 + i), xo1 = _mm512_loadu_ps(p1 + i + BLOCK / 2);
            for (int k = 0; k < ROWS; k++) {
                _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1);
                __m512i v = _mm512_maskz_loadu_epi16(m, row[k] + i);
                __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), wo = _mm512_castsi512_ps(_mm512_and_si512(v, high));
                e0[k] = _mm512_fmadd_ps(we, xe0, e0[k]), o0[k] = _mm512_fmadd_ps(wo, xo0, o0[k]);
                e1[k] = _mm512_fmadd_ps(we, xe1, e1[k]), o1[k] = _mm512_fmadd_ps(wo, xo1, o1[k]);
            }
        }
        for (int k = 0; k < ROWS && r + k < r1; k++) {
            y0[r + k] = _mm512_reduce_add_ps(_mm512_add_ps(e0[k], o0[k]));
            y1[r + k] = _mm512_reduce_add_ps(_mm512_add_ps(e1[k], o1[k]));
        }
    }
}
