#include <immintrin.h>

#include "infer/kv_rows.h"

/* The first min(n, 16) lanes. */
static inline __mmask16 tail_mask(long n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* min(n, 16) bf16 values widened to f32; the rest of the register is zero. */
static inline __m512 load_bf16(const cf_bf16 *p, long n) {
    __m256i h = _mm256_maskz_loadu_epi16(tail_mask(n), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

void kv_bf16_scores_avx512(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s) {
    for (long t = 0; t < T; t++) {
        const cf_bf16 *row = k + t * stride;
        __m512 acc = _mm512_setzero_ps();
        for (long i = 0; i < hd; i += 16)
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(hd - i), q + i), load_bf16(row + i, hd - i), acc);
        s[t] = _mm512_reduce_add_ps(acc) * scale;
    }
}

/* A block of 16 outputs stays in a register over all positions. */
void kv_bf16_weighted_sum_avx512(const float *s, const cf_bf16 *v, long stride, long T, long hd, float *out) {
    for (long i = 0; i < hd; i += 16) {
        __m512 acc = _mm512_setzero_ps();
        for (long t = 0; t < T; t++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(s[t]), load_bf16(v + t * stride + i, hd - i), acc);
        _mm512_mask_storeu_ps(out + i, tail_mask(hd - i), acc);
    }
}
