#include "infer/kv_rows.h"

#include "kernels/context/context.h"

void cf_kv_bf16_scores_scalar(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s) {
    for (long t = 0; t < T; t++) {
        const cf_bf16 *row = k + t * stride;
        float acc = 0.0f;
        for (long i = 0; i < hd; i++) acc += q[i] * cf_bf16_to_f32(row[i]);
        s[t] = acc * scale;
    }
}

void cf_kv_bf16_weighted_sum_scalar(const float *s, const cf_bf16 *v, long stride, const void *const *rows, size_t off,
                                 long T, long hd, float *out) {
    for (long i = 0; i < hd; i++) out[i] = 0.0f;
    for (long t = 0; t < T; t++)
        for (long i = 0; i < hd; i++) out[i] += s[t] * cf_bf16_to_f32(kv_row(v, stride, rows, off, t)[i]);
}

/* Values in block b of a head of hd values (32, or fewer in a partial last block). */
static inline long q8_block_len(long hd, long b) {
    return hd - b * CF_Q8_0_BLOCK < CF_Q8_0_BLOCK ? hd - b * CF_Q8_0_BLOCK : CF_Q8_0_BLOCK;
}

void cf_kv_q8_scores_scalar(const float *q, const void *k, size_t stride, long T, long hd, float scale, float *s) {
    long blocks = (hd + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    for (long t = 0; t < T; t++) {
        const cf_block_q8_0 *row = (const cf_block_q8_0 *)((const char *)k + (size_t)t * stride);
        float acc = 0.0f;
        for (long b = 0; b < blocks; b++) {
            float dot = 0.0f;
            for (long i = 0; i < q8_block_len(hd, b); i++) dot += q[b * CF_Q8_0_BLOCK + i] * (float)row[b].q[i];
            acc += cf_f16_to_f32(row[b].d) * dot;
        }
        s[t] = acc * scale;
    }
}

void cf_kv_q8_weighted_sum_scalar(const float *s, const void *v, size_t stride, long T, long hd, float *out) {
    long blocks = (hd + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    for (long i = 0; i < hd; i++) out[i] = 0.0f;
    for (long t = 0; t < T; t++) {
        const cf_block_q8_0 *row = (const cf_block_q8_0 *)((const char *)v + (size_t)t * stride);
        for (long b = 0; b < blocks; b++) {
            float c = s[t] * cf_f16_to_f32(row[b].d);
            for (long i = 0; i < q8_block_len(hd, b); i++) out[b * CF_Q8_0_BLOCK + i] += c * (float)row[b].q[i];
        }
    }
}

void cf_kv_bf16_scores(const float *q, const cf_bf16 *k, long stride, long T, long hd, float scale, float *s) {
    cf_kernels()->cf_kv_bf16_scores(q, k, stride, T, hd, scale, s);
}

void cf_kv_bf16_weighted_sum(const float *s, const cf_bf16 *v, long stride, long T, long hd, float *out) {
    cf_kernels()->cf_kv_bf16_weighted_sum(s, v, stride, NULL, 0, T, hd, out);
}

void cf_kv_bf16_weighted_sum_rows(const float *s, const void *const *rows, size_t off, long T, long hd, float *out) {
    cf_kernels()->cf_kv_bf16_weighted_sum(s, NULL, 0, rows, off, T, hd, out);
}

void cf_kv_q8_scores(const float *q, const void *k, size_t stride, long T, long hd, float scale, float *s) {
    cf_kernels()->cf_kv_q8_scores(q, k, stride, T, hd, scale, s);
}

void cf_kv_q8_weighted_sum(const float *s, const void *v, size_t stride, long T, long hd, float *out) {
    cf_kernels()->cf_kv_q8_weighted_sum(s, v, stride, T, hd, out);
}
