/* The forward pass over a chunk of tokens with the contiguous KV cache: batched matmuls
 * (cf_sgemm / cf_gemm_bf16; q8_0 / q4_0 the dequantizing GEMM from the kernel context's row
 * count, the several-input matvec below it) for prompts, matrix-vector products for
 * single-token decode.
 * The blocks themselves are block.c's interpreter of the family's program. */
#include <math.h>
#include <string.h>

#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "core/denormals.h"
#include "infer/kv_rows.h"
#include "infer/matvec.h"
#include "infer/model_internal.h"
#include "kernels/context/context.h"

/* Whether n rows through q8_0 / q4_0 weights take a GEMM (the context's int8 one, else the
 * dequantizing f32 one) rather than the several-input matvec: from the kernel context's
 * measured row count. The two round differently, so which one a chunk takes depends on its size; forward.c
 * runs one sequence, whose chunks are its own (serve's steps, forward_paged.c, stay on the
 * matvec for every row). */
static bool quantized_gemm(cf_dtype dtype, long n) {
    const cf_kernel_context *k = cf_kernels();
    return n >= (dtype == CF_Q8_0 ? k->infer_q8_gemm_min_rows : k->infer_q4_gemm_min_rows);
}

/* y_i[n, out_i] = x[n, in] @ W_i^T for a group of projections of the same input; a
 * single token takes one fused matrix-vector dispatch, a chunk one GEMM per weight. */
static void linears(cf_infer_model *m, const infer_linear *const *L, float *const *y, int count, const float *x,
                    long n) {
    bool blocks = cf_dtype_is_blocks(L[0]->dtype);
    if (n > 1 && blocks && quantized_gemm(L[0]->dtype, n)) {
        const cf_kernel_context *k = cf_kernels();
        if (k->matvec_q_gemm) { /* the int8 GEMM: x quantized once for the group */
            long stride = matvec_pairs_floats(L[0]->in) * (long)sizeof(float);
            for (long t = 0; t < n; t++) k->cf_matvec_quantize_x(x + t * L[0]->in, L[0]->in, (char *)m->x_pairs + t * stride);
            for (int i = 0; i < count; i++)
                k->matvec_q_gemm(L[i]->w, L[i]->dtype == CF_Q4_0, m->x_pairs, stride, n, L[i]->in, L[i]->out, y[i],
                                 L[i]->out);
            return;
        }
        for (int i = 0; i < count; i++) {
            matvec_q8 w = matvec_q_planes(L[i]->w, L[i]->dtype == CF_Q4_0);
            cf_gemm_weight_planes(n, L[i]->out, L[i]->in, x, L[i]->in, L[i]->dtype, w.q, w.d, w.blocks, y[i],
                                  L[i]->out);
        }
        return;
    }
    if (n == 1 || blocks) { /* short q8_0 / q4_0 chunks too: each range of rows read once for all tokens */
        matvec_part parts[3];
        for (int i = 0; i < count; i++) parts[i] = (matvec_part){.w = L[i]->w, .y = y[i], .rows = L[i]->out};
        cf_infer_matvec_batch(parts, count, L[0]->dtype, x, n, L[0]->in, m->x_pairs);
        return;
    }
    if (L[0]->dtype == CF_BF16) cf_convert_f32_to_bf16(x, m->act16, (size_t)(n * L[0]->in));
    for (int i = 0; i < count; i++) {
        if (L[i]->dtype == CF_F32)
            cf_sgemm(false, true, n, L[i]->out, L[i]->in, 1.0f, x, L[i]->in, L[i]->w, L[i]->in, 0.0f, y[i], L[i]->out);
        else
            cf_gemm_bf16(false, true, n, L[i]->out, L[i]->in, 1.0f, m->act16, L[i]->in, L[i]->w, L[i]->in, 0.0f, y[i],
                         L[i]->out);
    }
}

static void linear(cf_infer_model *m, const infer_linear *L, const float *x, float *y, long n) {
    linears(m, &L, &y, 1, x, n);
}

typedef struct attn_job {
    cf_infer_model *m;
    const void *k, *v; /* this layer's cache, of m->kv_dtype */
    long n, pos;
    const cf_attn_mask *mask;
} attn_job;

/* 8 independent sums, so the compiler vectorises it without -ffast-math. */
static float dot(const float *a, const float *b, long n) {
    enum { LANES = 8 };
    float acc[LANES] = {0};
    long i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) acc[l] += a[i + l] * b[i + l];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    for (int l = 0; l < LANES; l++) s += acc[l];
    return s;
}

/* A single decode token over an f32 cache: direct loops (the products are too small for a
 * GEMM to pay off). */
static void decode_head_f32(const cf_infer_model *m, const float *q, const float *k, const float *v, long T,
                            float scale, const cf_attn_mask *mask, float *s, float *out) {
    for (long t = 0; t < T; t++) s[t] = dot(q, k + t * m->kv_dim, m->head_dim) * scale;
    cf_mask_softcap(mask, s, T);
    cf_softmax(s, 1, T);
    memset(out, 0, sizeof(float) * (size_t)m->head_dim);
    for (long t = 0; t < T; t++)
        for (long i = 0; i < m->head_dim; i++) out[i] += s[t] * v[t * m->kv_dim + i];
}

/* Rows [0, T) of one head's bf16 or q8_0 keys or values (kv_row_bytes apart), widened
 * into a dense [T, head_dim] block. */
static float *widen_head(const cf_infer_model *m, const void *src, long T, float *dst) {
    for (long t = 0; t < T; t++) {
        const void *row = (const char *)src + (size_t)t * m->kv_row_bytes;
        if (m->kv_dtype == CF_Q8_0)
            cf_dequantize_q8_0(row, dst + t * m->head_dim, 1, m->head_dim);
        else
            cf_convert_bf16_to_f32(row, dst + t * m->head_dim, (size_t)m->head_dim);
    }
    return dst;
}

void cf_infer_kv_store(const cf_infer_model *m, const float *src, void *dst, long rows) {
    switch (m->kv_dtype) {
    case CF_BF16: cf_convert_f32_to_bf16(src, dst, (size_t)(rows * m->kv_dim)); break;
    case CF_Q8_0: cf_quantize_q8_0(src, dst, rows * m->cfg.num_kv_heads, m->head_dim); break;
    default: memcpy(dst, src, sizeof(float) * (size_t)(rows * m->kv_dim)); break;
    }
}

/* One query head over the cache positions its queries see (kernels/attn_mask.h; causal:
 * 0 .. pos+n-1, the last query's; under a window only from the first query's first key
 * k0 on, so decode reads W rows of the cache). A decode token reads the cache row by
 * row (bf16 and q8_0 rows widened in registers); a prompt chunk uses GEMMs, over a widened
 * f32 copy of this head's rows when the cache is bf16 or q8_0 (the copy costs T * head_dim
 * conversions against the GEMMs' n * T * head_dim multiply-adds). */
static void attention_head(void *arg, int h, int thread) {
    const attn_job *j = arg;
    cf_infer_model *m = j->m;
    long hd = m->head_dim, kvh = h / (m->cfg.num_heads / m->cfg.num_kv_heads);
    long k0 = cf_mask_first_key(j->mask, j->pos), T = cf_mask_keys(j->mask, j->pos + j->n - 1, j->pos + j->n) - k0;
    size_t head_off = (size_t)kvh * m->kv_head_bytes + (size_t)k0 * m->kv_row_bytes;
    const void *k = (const char *)j->k + head_off, *v = (const char *)j->v + head_off;
    const float *q = m->q + h * hd;
    float *out = m->att + h * hd, *s = m->scores + (long)thread * INFER_CHUNK * m->max_seq;
    float scale = 1.0f / sqrtf((float)hd);
    if (j->n == 1 && m->kv_dtype == CF_BF16) {
        cf_kv_bf16_scores(q, k, m->kv_dim, T, hd, scale, s);
        cf_mask_softcap(j->mask, s, T);
        cf_softmax(s, 1, T);
        cf_kv_bf16_weighted_sum(s, v, m->kv_dim, T, hd, out);
        return;
    }
    if (j->n == 1 && m->kv_dtype == CF_Q8_0) {
        cf_kv_q8_scores(q, k, m->kv_row_bytes, T, hd, scale, s);
        cf_mask_softcap(j->mask, s, T);
        cf_softmax(s, 1, T);
        cf_kv_q8_weighted_sum(s, v, m->kv_row_bytes, T, hd, out);
        return;
    }
    if (j->n == 1) {
        decode_head_f32(m, q, k, v, T, scale, j->mask, s, out);
        return;
    }
    const float *kf = k, *vf = v;
    long ld = m->kv_dim;
    if (m->kv_dtype != CF_F32) {
        float *scratch = m->kv_f32 + (long)thread * 2 * m->max_seq * hd;
        kf = widen_head(m, k, T, scratch), vf = widen_head(m, v, T, scratch + m->max_seq * hd), ld = hd;
    }
    cf_sgemm(false, true, j->n, T, hd, scale, q, m->q_dim, kf, ld, 0.0f, s, T);
    cf_softmax_masked_from(s, 1, j->n, T, j->pos, k0, j->mask);
    cf_sgemm(false, false, j->n, hd, T, 1.0f, s, T, vf, ld, 0.0f, out, m->q_dim);
}

/* Heads run on the pool unless the whole attention is too small to pay for a dispatch. */
static void attention(cf_infer_model *m, const void *kc, const void *vc, long n, long pos, const cf_attn_mask *mask) {
    enum { INLINE_WORK = 1 << 15 };
    attn_job job = {.m = m, .k = kc, .v = vc, .n = n, .pos = pos, .mask = mask};
    long heads = m->cfg.num_heads;
    if (heads * n * (pos + n) * m->head_dim < INLINE_WORK || cf_num_threads() == 1)
        for (long h = 0; h < heads; h++) attention_head(&job, (int)h, 0);
    else
        cf_parallel_for((int)heads, attention_head, &job);
}

/* Where layer l's cache rows for position pos start. */
static void *cache_at(const cf_infer_model *m, void *cache, long l, long pos) {
    return (char *)cache + (size_t)(l * m->max_seq + pos) * m->kv_row_bytes;
}

typedef struct chunk {
    cf_infer_model *m;
    long pos;
} chunk;

static void chunk_linears(void *ctx, const infer_linear *const *L, float *const *y, int count, const float *x, long n) {
    linears(((chunk *)ctx)->m, L, y, count, x, n);
}

/* An f32 cache takes the new keys and values in place; a bf16 or q8_0 one after rounding. */
static void chunk_kv_rows(void *ctx, long l, float **k_new, float **v_new) {
    const chunk *c = ctx;
    cf_infer_model *m = c->m;
    bool f32 = m->kv_dtype == CF_F32;
    *k_new = f32 ? cache_at(m, m->k_cache, l, c->pos) : m->k_new;
    *v_new = f32 ? cache_at(m, m->v_cache, l, c->pos) : m->v_new;
}

static void chunk_attend(void *ctx, long l, long n, const cf_attn_mask *mask) {
    const chunk *c = ctx;
    cf_infer_model *m = c->m;
    if (m->kv_dtype != CF_F32) {
        cf_infer_kv_store(m, m->k_new, cache_at(m, m->k_cache, l, c->pos), n);
        cf_infer_kv_store(m, m->v_new, cache_at(m, m->v_cache, l, c->pos), n);
    }
    attention(m, cache_at(m, m->k_cache, l, 0), cache_at(m, m->v_cache, l, 0), n, c->pos, mask);
}

static void forward_chunk(cf_infer_model *m, const int32_t *tokens, long n, long pos, float *logits, bool all_logits) {
    chunk c = {.m = m, .pos = pos};
    infer_path path = {.ctx = &c, .linears = chunk_linears, .kv_rows = chunk_kv_rows, .attend = chunk_attend,
                       .positions = NULL, .pos = pos};
    cf_infer_embed(m, tokens, n, NULL, pos);
    for (long l = 0; l < m->cfg.num_layers; l++) cf_infer_block(m, l, n, &path);
    if (all_logits) {
        cf_infer_final_norm(m, m->x, m->xb, n);
        linear(m, &m->lm_head, m->xb, logits, n);
        cf_infer_logit_softcap(m, logits, n);
    } else if (logits) {
        cf_infer_final_norm(m, m->x + (n - 1) * m->dim, m->xb, 1);
        linear(m, &m->lm_head, m->xb, logits, 1);
        cf_infer_logit_softcap(m, logits, 1);
    }
}

int cf_infer_forward(cf_infer_model *m, const int32_t *tokens, long n, long pos, float *logits, bool all_logits,
                     cf_error *err) {
    if (n < 1 || pos < 0 || pos + n > m->max_seq)
        return cf_fail(err, "positions %ld..%ld do not fit the KV cache of %ld tokens", pos, pos + n - 1, m->max_seq);
    for (long t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= m->vocab)
            return cf_fail(err, "token %d at position %ld is outside the vocabulary of %ld", tokens[t], pos + t,
                           m->vocab);
    if (cf_num_threads() > m->score_threads) cf_infer_alloc_thread_scratch(m); /* the pool grew since loading */
    unsigned fp_mode = cf_denormals_off();
    for (long done = 0; done < n; done += INFER_CHUNK) {
        long len = n - done < INFER_CHUNK ? n - done : INFER_CHUNK;
        bool last = done + len == n;
        float *out = all_logits ? logits + done * m->vocab : last ? logits : NULL;
        forward_chunk(m, tokens + done, len, pos + done, out, all_logits);
    }
    cf_fp_mode_restore(fp_mode);
    return 0;
}

/* For the paged, batched forward (forward_paged.c), which must compute exactly what this
 * path does token by token. */
float cf_infer_dot(const float *a, const float *b, long n) { return dot(a, b, n); }
