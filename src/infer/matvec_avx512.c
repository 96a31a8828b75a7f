#include <immintrin.h>

#include "infer/matvec.h"

enum { ROWS = 4 };

static inline __m512 load_bf16(const cf_bf16 *p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* ROWS rows at a time; a short last group repeats its final row and stores only the valid ones. */
#define MATVEC_AVX512(NAME, T, LOAD)                                                                                   \
    void NAME(const T *w, const float *x, float *y, long r0, long r1, long in) {                                      \
        for (long r = r0; r < r1; r += ROWS) {                                                                         \
            const T *row[ROWS];                                                                                        \
            for (int k = 0; k < ROWS; k++) row[k] = w + (r + k < r1 ? r + k : r1 - 1) * in;                            \
            __m512 acc[ROWS];                                                                                          \
            for (int k = 0; k < ROWS; k++) acc[k] = _mm512_setzero_ps();                                               \
            for (long i = 0; i < in; i += 16) {                                                                        \
                __mmask16 m = in - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (in - i)) - 1);                   \
                __m512 xv = _mm512_maskz_loadu_ps(m, x + i);                                                           \
                for (int k = 0; k < ROWS; k++) acc[k] = _mm512_fmadd_ps(LOAD(row[k] + i, m), xv, acc[k]);              \
            }                                                                                                          \
            for (int k = 0; k < ROWS && r + k < r1; k++) y[r + k] = _mm512_reduce_add_ps(acc[k]);                      \
        }                                                                                                              \
    }

#define LOAD_F32(p, m) _mm512_maskz_loadu_ps(m, p)
MATVEC_AVX512(matvec_f32_rows_avx512, float, LOAD_F32)
MATVEC_AVX512(matvec_bf16_rows_avx512, cf_bf16, load_bf16)
