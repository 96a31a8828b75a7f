#include <immintrin.h>

#include "infer/kv_rows.h"

/* The first min(n, 16) lanes. */
static inline __mmask16 tail_mask(long n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* min(n, 16) bf16 values widened to f32; the rest of the register is zero. */
static inline __m512 load_bf16(const cf_bf16 *p, long n) {
    __m256i h = _mm256_maskz_loadu_epi16(tail_mask(n), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Keys row by row, KV_AHEAD rows prefetched ahead. */
void cf_kv_bf16_scores_avx512(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s) {
    for (long t = 0; t < KV_AHEAD && t < T; t++) kv_prefetch_row(k + t * stride, hd);
    for (long t = 0; t < T; t++) {
        const cf_bf16 *row = k + t * stride;
        if (t + KV_AHEAD < T) kv_prefetch_row(row + KV_AHEAD * stride, hd);
        __m512 acc = _mm512_setzero_ps();
        for (long i = 0; i < hd; i += 16)
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(hd - i), q + i), load_bf16(row + i, hd - i), acc);
        s[t] = _mm512_reduce_add_ps(acc) * scale;
    }
}

/* Positions outer, up to MAX_ACC blocks of 16 outputs in registers (the same sums in the
 * same order per output as a block at a time over all positions, so the result is the
 * same bit for bit), each row read once, front to back; rows KV_AHEAD positions ahead
 * prefetched. Rows as kv_row gives them (strided, or through a table of row pointers). */
enum { MAX_ACC = 8 };
void cf_kv_bf16_weighted_sum_avx512(const float *s, const cf_bf16 *v, long stride, const void *const *rows, size_t off,
                                 long T, long hd, float *out) {
    for (long i0 = 0; i0 < hd; i0 += 16 * MAX_ACC) {
        long width = hd - i0 < 16 * MAX_ACC ? hd - i0 : 16 * MAX_ACC, nacc = (width + 15) / 16;
        __m512 acc[MAX_ACC];
        for (int a = 0; a < MAX_ACC; a++) acc[a] = _mm512_setzero_ps();
        for (long t = 0; t < KV_AHEAD && t < T; t++) kv_prefetch_row(kv_row(v, stride, rows, off, t) + i0, width);
        for (long t = 0; t < T; t++) {
            const cf_bf16 *row = kv_row(v, stride, rows, off, t) + i0;
            if (t + KV_AHEAD < T) kv_prefetch_row(kv_row(v, stride, rows, off, t + KV_AHEAD) + i0, width);
            __m512 c = _mm512_set1_ps(s[t]);
            for (long a = 0; a < nacc; a++) acc[a] = _mm512_fmadd_ps(c, load_bf16(row + 16 * a, width - 16 * a), acc[a]);
        }
        for (long a = 0; a < nacc; a++) _mm512_mask_storeu_ps(out + i0 + 16 * a, tail_mask(width - 16 * a), acc[a]);
    }
}

/* A q8_0 block's f16 scale (vcvtph2ps is AVX-512F; the scalar F16C form is not enabled here). */
static inline float q8_scale(cf_f16 d) {
    return _mm512_cvtss_f32(_mm512_cvtph_ps(_mm256_castsi128_si256(_mm_cvtsi32_si128(d))));
}

/* min(n, 16) int8 values widened to f32; the rest of the register is zero. */
static inline __m512 load_i8(const int8_t *p, long n) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(tail_mask(n), p)));
}

/* Per row: each block's two 16-lane halves multiplied with q and summed, times the scale. */
void cf_kv_q8_scores_avx512(const float *q, const void *k, size_t stride, long T, long hd, float scale, float *s) {
    long blocks = (hd + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    for (long t = 0; t < T; t++) {
        const cf_block_q8_0 *row = (const cf_block_q8_0 *)((const char *)k + (size_t)t * stride);
        __m512 acc = _mm512_setzero_ps();
        for (long b = 0; b < blocks; b++) {
            long i = b * CF_Q8_0_BLOCK, n = hd - i;
            __m512 dot = _mm512_mul_ps(_mm512_maskz_loadu_ps(tail_mask(n), q + i), load_i8(row[b].q, n));
            if (n > 16)
                dot = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail_mask(n - 16), q + i + 16),
                                      load_i8(row[b].q + 16, n - 16), dot);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(q8_scale(row[b].d)), dot, acc);
        }
        s[t] = _mm512_reduce_add_ps(acc) * scale;
    }
}

/* A block of 32 outputs stays in two registers over all positions. */
void cf_kv_q8_weighted_sum_avx512(const float *s, const void *v, size_t stride, long T, long hd, float *out) {
    long blocks = (hd + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    for (long b = 0; b < blocks; b++) {
        long i = b * CF_Q8_0_BLOCK, n = hd - i;
        __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
        for (long t = 0; t < T; t++) {
            const cf_block_q8_0 *blk = (const cf_block_q8_0 *)((const char *)v + (size_t)t * stride) + b;
            __m512 c = _mm512_set1_ps(s[t] * q8_scale(blk->d));
            lo = _mm512_fmadd_ps(c, load_i8(blk->q, n), lo);
            if (n > 16) hi = _mm512_fmadd_ps(c, load_i8(blk->q + 16, n - 16), hi);
        }
        _mm512_mask_storeu_ps(out + i, tail_mask(n), lo);
        if (n > 16) _mm512_mask_storeu_ps(out + i + 16, tail_mask(n - 16), hi);
    }
}
