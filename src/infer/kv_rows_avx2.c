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

void cf_kv_bf16_scores_avx2(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s) {
    long whole = hd / 8 * 8;
    for (long t = 0; t < KV_AHEAD && t < T; t++) kv_prefetch_row(k + t * stride, hd);
    for (long t = 0; t < T; t++) {
        const cf_bf16 *row = k + t * stride;
        if (t + KV_AHEAD < T) kv_prefetch_row(row + KV_AHEAD * stride, hd);
        __m256 acc = _mm256_setzero_ps();
        for (long i = 0; i < whole; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load_bf16(row + i), acc);
        float dot = hsum(acc);
        for (long i = whole; i < hd; i++) dot += q[i] * cf_bf16_to_f32(row[i]);
        s[t] = dot * scale;
    }
}

/* Positions outer, up to MAX_ACC blocks of 8 outputs in registers (per output the same
 * sums in the same order as a block at a time over all positions), each row read once,
 * rows KV_AHEAD positions ahead prefetched; the tail is scalar. Rows as kv_row gives them. */
enum { MAX_ACC = 8 };
void cf_kv_bf16_weighted_sum_avx2(const float *s, const cf_bf16 *v, long stride, const void *const *rows, size_t off,
                               long T, long hd, float *out) {
    long whole = hd / 8 * 8;
    for (long i0 = 0; i0 < whole; i0 += 8 * MAX_ACC) {
        long width = whole - i0 < 8 * MAX_ACC ? whole - i0 : 8 * MAX_ACC, nacc = width / 8;
        __m256 acc[MAX_ACC];
        for (int a = 0; a < MAX_ACC; a++) acc[a] = _mm256_setzero_ps();
        for (long t = 0; t < KV_AHEAD && t < T; t++) kv_prefetch_row(kv_row(v, stride, rows, off, t) + i0, width);
        for (long t = 0; t < T; t++) {
            const cf_bf16 *row = kv_row(v, stride, rows, off, t) + i0;
            if (t + KV_AHEAD < T) kv_prefetch_row(kv_row(v, stride, rows, off, t + KV_AHEAD) + i0, width);
            __m256 c = _mm256_set1_ps(s[t]);
            for (long a = 0; a < nacc; a++) acc[a] = _mm256_fmadd_ps(c, load_bf16(row + 8 * a), acc[a]);
        }
        for (long a = 0; a < nacc; a++) _mm256_storeu_ps(out + i0 + 8 * a, acc[a]);
    }
    for (long i = whole; i < hd; i++) {
        float acc = 0.0f;
        for (long t = 0; t < T; t++) acc += s[t] * cf_bf16_to_f32(kv_row(v, stride, rows, off, t)[i]);
        out[i] = acc;
    }
}

/* 8 int8 values widened to f32. */
static inline __m256 load_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* Values in block b of a head of hd values. */
static inline long block_len(long hd, long b) {
    return hd - b * CF_Q8_0_BLOCK < CF_Q8_0_BLOCK ? hd - b * CF_Q8_0_BLOCK : CF_Q8_0_BLOCK;
}

/* Per row and block: groups of 8 in a register, a partial block's last values scalar. */
void cf_kv_q8_scores_avx2(const float *q, const void *k, size_t stride, long T, long hd, float scale, float *s) {
    long blocks = (hd + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    for (long t = 0; t < T; t++) {
        const cf_block_q8_0 *row = (const cf_block_q8_0 *)((const char *)k + (size_t)t * stride);
        __m256 acc = _mm256_setzero_ps();
        float tail = 0.0f;
        for (long b = 0; b < blocks; b++) {
            long i0 = b * CF_Q8_0_BLOCK, n = block_len(hd, b), whole = n / 8 * 8;
            __m256 dot = _mm256_setzero_ps();
            for (long i = 0; i < whole; i += 8) dot = _mm256_fmadd_ps(_mm256_loadu_ps(q + i0 + i), load_i8(row[b].q + i), dot);
            float d = _cvtsh_ss(row[b].d), rest = 0.0f;
            for (long i = whole; i < n; i++) rest += q[i0 + i] * (float)row[b].q[i];
            acc = _mm256_fmadd_ps(_mm256_set1_ps(d), dot, acc);
            tail += d * rest;
        }
        s[t] = (hsum(acc) + tail) * scale;
    }
}

/* A block's groups of 8 outputs stay in registers over all positions; a partial block's
 * last values are summed scalar. */
void cf_kv_q8_weighted_sum_avx2(const float *s, const void *v, size_t stride, long T, long hd, float *out) {
    long blocks = (hd + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    for (long b = 0; b < blocks; b++) {
        long i0 = b * CF_Q8_0_BLOCK, n = block_len(hd, b), groups = n / 8;
        __m256 acc[CF_Q8_0_BLOCK / 8] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                         _mm256_setzero_ps()};
        for (long i = groups * 8; i < n; i++) out[i0 + i] = 0.0f;
        for (long t = 0; t < T; t++) {
            const cf_block_q8_0 *blk = (const cf_block_q8_0 *)((const char *)v + (size_t)t * stride) + b;
            float c = s[t] * _cvtsh_ss(blk->d);
            __m256 cv = _mm256_set1_ps(c);
            for (long g = 0; g < groups; g++) acc[g] = _mm256_fmadd_ps(cv, load_i8(blk->q + 8 * g), acc[g]);
            for (long i = groups * 8; i < n; i++) out[i0 + i] += c * (float)blk->q[i];
        }
        for (long g = 0; g < groups; g++) _mm256_storeu_ps(out + i0 + 8 * g, acc[g]);
    }
}
