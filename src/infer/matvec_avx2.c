#include <immintrin.h>

#include "infer/matvec.h"

enum { ROWS = 4 };

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 load_bf16(const cf_bf16 *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float to_f32(float v) { return v; }

/* ROWS rows at a time (a short last group repeats its final row), scalar tail columns. */
#define MATVEC_AVX2(NAME, T, LOAD, SCALAR)                                                                             \
    void NAME(const T *w, const float *x, float *y, long r0, long r1, long in) {                                      \
        long vec_end = in - in % 8;                                                                                    \
        for (long r = r0; r < r1; r += ROWS) {                                                                         \
            const T *row[ROWS];                                                                                        \
            for (int k = 0; k < ROWS; k++) row[k] = w + (r + k < r1 ? r + k : r1 - 1) * in;                            \
            __m256 acc[ROWS];                                                                                          \
            for (int k = 0; k < ROWS; k++) acc[k] = _mm256_setzero_ps();                                               \
            for (long i = 0; i < vec_end; i += 8) {                                                                    \
                __m256 xv = _mm256_loadu_ps(x + i);                                                                    \
                for (int k = 0; k < ROWS; k++) acc[k] = _mm256_fmadd_ps(LOAD(row[k] + i), xv, acc[k]);                 \
            }                                                                                                          \
            for (int k = 0; k < ROWS && r + k < r1; k++) {                                                             \
                float s = hsum(acc[k]);                                                                                \
                for (long i = vec_end; i < in; i++) s += SCALAR(row[k][i]) * x[i];                                     \
                y[r + k] = s;                                                                                          \
            }                                                                                                          \
        }                                                                                                              \
    }

MATVEC_AVX2(matvec_f32_rows_avx2, float, _mm256_loadu_ps, to_f32)
MATVEC_AVX2(matvec_bf16_rows_avx2, cf_bf16, load_bf16, cf_bf16_to_f32)
