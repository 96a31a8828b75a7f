#include <immintrin.h>

#include "infer/kv_rows.h"

/* 8 bf16 values widened to f32. */
static inline __m256 load_bf16(const cf_bf16 *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

void kv_bf16_scores_avx2(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s) {
    long whole = hd / 8 * 8;
    for (long t = 0; t < T; t++) {
        const cf_bf16 *row = k + t * stride;
        __m256 acc = _mm256_setzero_ps();
        for (long i = 0; i < whole; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_bf16(row + i), acc);
        float dot = hsum(acc);
        for (long i = whole; i < hd; i++) dot += q[i] * cf_bf16_to_f32(row[i]);
        s[t] = dot * scale;
    }
}

/* A block of 8 outputs stays in a register over all positions; the tail is scalar. */
void kv_bf16_weighted_sum_avx2(const float *s, const cf_bf16 *v, long stride, long T, long hd, float *out) {
    long whole = hd / 8 * 8;
    for (long i = 0; i < whole; i += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (long t = 0; t < T; t++) acc = _mm256_fmadd_ps(_mm256_set1_ps(s[t]), load_bf16(v + t * stride + i), acc);
        _mm256_storeu_ps(out + i, acc);
    }
    for (long i = whole; i < hd; i++) {
        float acc = 0.0f;
        for (long t = 0; t < T; t++) acc += s[t] * cf_bf16_to_f32(v[t * stride + i]);
        out[i] = acc;
    }
}
