/* Decode attention over a bf16 KV cache: one query head's scores against the cached keys
 * and the score-weighted sum of the cached values, widening each bf16 row to f32 in
 * registers as it is read (the cache is read once per token, like the weights, so reading
 * half the bytes is what makes it faster). Rows are `stride` elements apart (kv_dim). */
#ifndef CFORMERS_INFER_KV_ROWS_H
#define CFORMERS_INFER_KV_ROWS_H

#include "cformers/dtype.h"

/* The bf16 kernels prefetch rows KV_AHEAD positions ahead into L2 while a row is read: a
 * layer's cache was last read a whole token of weights ago, so it comes from memory, and a
 * head's rows are kv_dim apart, a stride the hardware prefetcher follows only slowly (with
 * the weighted sum reading each row once, attention went from 15.8% to 7.3% of a q8_0
 * decode step of the 110M model at 128-192 positions). */
enum { KV_AHEAD = 16 };
static inline void kv_prefetch_row(const cf_bf16 *row, long n) {
    for (long b = 0; b < n * (long)sizeof(cf_bf16); b += 64) __builtin_prefetch((const char *)row + b, 0, 2);
}

/* s[t] = scale * dot(q[hd], k[t * stride .. + hd]) for t < T. */
void cf_kv_bf16_scores(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s);
/* out[hd] = sum over t < T of s[t] * v[t * stride .. + hd]. */
void cf_kv_bf16_weighted_sum(const float *s, const cf_bf16 *v, long stride, long T, long hd, float *out);
/* The same, bit for bit, with row t at (const char *)rows[t] + off (the paged cache's rows,
 * read where they lie in their blocks). */
void cf_kv_bf16_weighted_sum_rows(const float *s, const void *const *rows, size_t off, long T, long hd, float *out);
/* Row t of v: rows[t] + off when there is a table of rows, else v + t * stride. */
static inline const cf_bf16 *kv_row(const cf_bf16 *v, long stride, const void *const *rows, size_t off, long t) {
    return rows ? (const cf_bf16 *)((const char *)rows[t] + off) : v + t * stride;
}

/* The same over a q8_0 cache: each row holds every KV head's head_dim values as
 * ceil(hd / 32) q8_0 blocks (cf_block_q8_0: an f16 scale d and 32 int8, value = d * q; a
 * partial last block's padding is never read), rows `stride` BYTES apart, k and v pointing
 * at the head's first block. Scores: s[t] = scale * sum over blocks of d * dot(q, q8);
 * weighted sum: out[i] = sum over t of (s[t] * d) * q8[i]. */
void cf_kv_q8_scores(const float *q, const void *k, size_t stride, long T, long hd, float scale, float *s);
void cf_kv_q8_weighted_sum(const float *s, const void *v, size_t stride, long T, long hd, float *out);

/* The same per instruction set (the ISA files are compiled for it); the weighted sums take
 * the rows as kv_row does. */
void cf_kv_bf16_scores_avx512(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s);
void cf_kv_bf16_weighted_sum_avx512(const float *s, const cf_bf16 *v, long stride, const void *const *rows, size_t off,
                                 long T, long hd, float *out);
void cf_kv_bf16_scores_avx2(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s);
void cf_kv_bf16_weighted_sum_avx2(const float *s, const cf_bf16 *v, long stride, const void *const *rows, size_t off,
                               long T, long hd, float *out);

void cf_kv_q8_scores_avx512(const float *q, const void *k, size_t stride, long T, long hd, float scale, float *s);
void cf_kv_q8_weighted_sum_avx512(const float *s, const void *v, size_t stride, long T, long hd, float *out);
void cf_kv_q8_scores_avx2(const float *q, const void *k, size_t stride, long T, long hd, float scale, float *s);
void cf_kv_q8_weighted_sum_avx2(const float *s, const void *v, size_t stride, long T, long hd, float *out);
/* The portable loops (also the reference the ISA kernels are tested against). */
void cf_kv_bf16_scores_scalar(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s);
void cf_kv_bf16_weighted_sum_scalar(const float *s, const cf_bf16 *v, long stride, const void *const *rows, size_t off,
                                 long T, long hd, float *out);
void cf_kv_q8_scores_scalar(const float *q, const void *k, size_t stride, long T, long hd, float scale, float *s);
void cf_kv_q8_weighted_sum_scalar(const float *s, const void *v, size_t stride, long T, long hd, float *out);

#endif
