#include <immintrin.h>

#include "infer/matvec.h"
#include "infer/matvec_hsum.h"

enum { BLOCK = MATVEC_PAIR_BLOCK_AVX2 };

/* MATVEC_ROWS rows at a time, scalar tail columns; STREAM: the streaming twin (matvec.h),
 * the group's rows spread over the range and no software prefetch. */
static inline __attribute__((always_inline)) void f32_rows(const void *wv, const void *xv, float *y, long r0, long r1,
                                                           long in, const int STREAM) {
    enum { ROWS = MATVEC_ROWS };
    const bool PREFETCH = !STREAM;
    const float *w = wv, *x = xv;
    long vec_end = in - in % 8;
    long dist = matvec_ahead_rows(in * (long)sizeof(float));
    if (PREFETCH) MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    matvec_groups gs = matvec_groups_of(r0, r1, ROWS, STREAM);
    for (long g = 0; g < gs.count; g++) {
        long idx[MATVEC_ROWS];
        int real = matvec_group_rows(&gs, g, ROWS, idx);
        const float *row[MATVEC_ROWS], *ahead[MATVEC_ROWS];
        MATVEC_IDX_ROWS(row, ahead, w, idx, r1, in, dist, ROWS)
        __m256 acc[MATVEC_ROWS];
        for (int k = 0; k < ROWS; k++) acc[k] = _mm256_setzero_ps();
        for (long i = 0; i < vec_end; i += 8) {
            __m256 xv = _mm256_loadu_ps(x + i);
            for (int k = 0; k < ROWS; k++) {
                if (PREFETCH && i % 16 == 0) _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1); /* once per line */
                acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(row[k] + i), xv, acc[k]);
            }
        }
        for (int k = 0; k < real; k++) {
            float s = matvec_hsum256(acc[k]);
            for (long i = vec_end; i < in; i++) s += row[k][i] * x[i];
            y[idx[k]] = s;
        }
    }
}

/* 16 bf16 weights per load, split into even and odd by a shift and a mask (see
 * matvec.h); the columns after the last whole block are done one by one. STREAM as f32_rows. */
static inline __attribute__((always_inline)) void bf16_rows(const void *wv, const void *xv, float *y, long r0, long r1,
                                                            long in, const int STREAM) {
    enum { ROWS = MATVEC_ROWS };
    const bool PREFETCH = !STREAM;
    const cf_bf16 *w = wv;
    const float *x_pairs = xv;
    const __m256i high = _mm256_set1_epi32((int)0xffff0000u);
    long vec_end = in - in % BLOCK;
    long dist = matvec_ahead_rows(in * (long)sizeof(cf_bf16));
    if (PREFETCH) MATVEC_PREFETCH_START(w, r0, r1, in, dist)
    matvec_groups gs = matvec_groups_of(r0, r1, ROWS, STREAM);
    for (long g = 0; g < gs.count; g++) {
        long idx[MATVEC_ROWS];
        int real = matvec_group_rows(&gs, g, ROWS, idx);
        const cf_bf16 *row[MATVEC_ROWS], *ahead[MATVEC_ROWS];
        MATVEC_IDX_ROWS(row, ahead, w, idx, r1, in, dist, ROWS)
        __m256 even[MATVEC_ROWS], odd[MATVEC_ROWS];
        for (int k = 0; k < ROWS; k++) even[k] = odd[k] = _mm256_setzero_ps();
        for (long i = 0; i < vec_end; i += BLOCK) {
            __m256 xe = _mm256_loadu_ps(x_pairs + i), xo = _mm256_loadu_ps(x_pairs + i + BLOCK / 2);
            for (int k = 0; k < ROWS; k++) {
                if (PREFETCH && i % 32 == 0) _mm_prefetch((const char *)(ahead[k] + i), _MM_HINT_T1); /* once per line */
                __m256i v = _mm256_loadu_si256((const __m256i *)(row[k] + i));
                even[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xe, even[k]);
                odd[k] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, high)), xo, odd[k]);
            }
        }
        for (int k = 0; k < real; k++) {
            float s = matvec_hsum256(_mm256_add_ps(even[k], odd[k]));
            for (long i = vec_end; i < in; i++) s += cf_bf16_to_f32(row[k][i]) * x_pairs[matvec_pair_index(i, BLOCK)];
            y[idx[k]] = s;
        }
    }
}

void cf_matvec_f32_rows_avx2(const void *w, const void *x, float *y, long r0, long r1, long in) {
    f32_rows(w, x, y, r0, r1, in, 0);
}
void cf_matvec_f32_stream_avx2(const void *w, const void *x, float *y, long r0, long r1, long in) {
    f32_rows(w, x, y, r0, r1, in, 1);
}
void cf_matvec_bf16_rows_avx2(const void *w, const void *x, float *y, long r0, long r1, long in) {
    bf16_rows(w, x, y, r0, r1, in, 0);
}
void cf_matvec_bf16_stream_avx2(const void *w, const void *x, float *y, long r0, long r1, long in) {
    bf16_rows(w, x, y, r0, r1, in, 1);
}
