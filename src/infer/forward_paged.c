/* One step of continuous batching over the paged KV cache (see paged_kv.h). Every token
 * takes the path forward.c's single-token decode takes (matrix-vector products, row-wise
 * attention over the cache), with the weights shared by the batch, so that results do not
 * depend on which sequences share a step or how a prompt is chunked. */
#include <math.h>
#include <string.h>

#include "cformers/threads.h"
#include "core/denormals.h"
#include "infer/kv_rows.h"
#include "infer/matvec.h"
#include "infer/model_internal.h"
#include "infer/paged_kv.h"

typedef struct paged_job {
    cf_infer_model *m;
    const infer_kv_pool *p;
    const infer_segment *segs;
    long layer;
} paged_job;

static const char *row_at(const infer_kv_pool *p, const char *base, long l, int32_t block, long off) {
    return base + (size_t)((l * p->n_blocks + block) * KV_BLOCK + off) * p->row_bytes;
}

/* Query head h of token i over positions 0 .. pos: scores into s[pos + 1], the result into
 * m->att, with the sums forward.c's decode takes in the same order: an f32 cache read as
 * decode_head_f32 reads it, a bf16 or q8_0 one by the kv_rows kernels (scores a block at a
 * time, the values gathered into one run first). Bit for bit equal matters beyond tidiness: a
 * difference in the last place can round a later layer's key to another bf16 value. */
static void attend(void *arg, int task, int thread) {
    const paged_job *j = arg;
    cf_infer_model *m = j->m;
    const infer_kv_pool *p = j->p;
    long heads = m->cfg.num_heads, i = task / heads, h = task % heads, hd = m->head_dim;
    long kvh = h / (heads / m->cfg.num_kv_heads), T = p->positions[i] + 1, l = j->layer;
    const int32_t *blocks = j->segs[p->seg_of[i]].blocks;
    const float *q = m->q + i * m->dim + h * hd;
    float *out = m->att + i * m->dim + h * hd, *s = m->scores + (long)thread * INFER_CHUNK * m->max_seq;
    float scale = 1.0f / sqrtf((float)hd);
    size_t head_off = (size_t)kvh * p->head_bytes;
    if (p->dtype == CF_Q8_0) {
        for (long t0 = 0; t0 < T; t0 += KV_BLOCK) {
            long n = T - t0 < KV_BLOCK ? T - t0 : KV_BLOCK;
            kv_q8_scores(q, row_at(p, p->k, l, blocks[t0 / KV_BLOCK], 0) + head_off, p->row_bytes, n, hd, scale, s + t0);
        }
        cf_softmax(s, 1, T);
        char *rows = (char *)(s + m->max_seq); /* as below: T slices of head_bytes fit the scratch */
        for (long t = 0; t < T; t++)
            memcpy(rows + (size_t)t * p->head_bytes, row_at(p, p->v, l, blocks[t / KV_BLOCK], t % KV_BLOCK) + head_off,
                   p->head_bytes);
        kv_q8_weighted_sum(s, rows, p->head_bytes, T, hd, out);
        return;
    }
    if (p->dtype == CF_BF16) {
        for (long t0 = 0; t0 < T; t0 += KV_BLOCK) {
            long n = T - t0 < KV_BLOCK ? T - t0 : KV_BLOCK;
            kv_bf16_scores(q, (const cf_bf16 *)(row_at(p, p->k, l, blocks[t0 / KV_BLOCK], 0) + head_off), p->kv_dim, n,
                           hd, scale, s + t0);
        }
        cf_softmax(s, 1, T);
        /* the head's value rows gathered, so the kernel sums them in the contiguous order */
        cf_bf16 *rows = (cf_bf16 *)(s + m->max_seq); /* the thread's scratch holds INFER_CHUNK x max_seq */
        for (long t = 0; t < T; t++)
            memcpy(rows + t * hd, row_at(p, p->v, l, blocks[t / KV_BLOCK], t % KV_BLOCK) + head_off,
                   sizeof(cf_bf16) * (size_t)hd);
        kv_bf16_weighted_sum(s, rows, hd, T, hd, out);
        return;
    }
    for (long t = 0; t < T; t++)
        s[t] = infer_dot(q, (const float *)(row_at(p, p->k, l, blocks[t / KV_BLOCK], t % KV_BLOCK) + head_off), hd) *
               scale;
    cf_softmax(s, 1, T);
    memset(out, 0, sizeof(float) * (size_t)hd);
    for (long t = 0; t < T; t++) {
        const float *v = (const float *)(row_at(p, p->v, l, blocks[t / KV_BLOCK], t % KV_BLOCK) + head_off);
        for (long d = 0; d < hd; d++) out[d] += s[t] * v[d];
    }
}

typedef struct step {
    cf_infer_model *m;
    infer_kv_pool *p;
    const infer_segment *segs;
} step;

/* y[n, out_i] = x[n, in] @ W_i^T for weights sharing the input, one pool dispatch. */
static void linears(infer_kv_pool *p, const infer_linear *const *L, float *const *y, int count, const float *x,
                    long n) {
    matvec_part parts[3];
    for (int i = 0; i < count; i++) parts[i] = (matvec_part){.w = L[i]->w, .y = y[i], .rows = L[i]->out};
    infer_matvec_batch(parts, count, L[0]->dtype, x, n, L[0]->in, p->pairs);
}

static void step_linears(void *ctx, const infer_linear *const *L, float *const *y, int count, const float *x, long n) {
    linears(((step *)ctx)->p, L, y, count, x, n);
}

static void step_kv_rows(void *ctx, long l, float **k_new, float **v_new) {
    (void)l;
    const step *s = ctx;
    *k_new = s->p->k_new, *v_new = s->p->v_new;
}

/* The new keys and values of the step, rotated, into their rows of the pool. */
static void store_rows(const cf_infer_model *m, infer_kv_pool *p, const infer_segment *segs, long l, long n) {
    for (long i = 0; i < n; i++) {
        long pos = p->positions[i];
        int32_t block = segs[p->seg_of[i]].blocks[pos / KV_BLOCK];
        char *k = (char *)row_at(p, p->k, l, block, pos % KV_BLOCK), *v = (char *)row_at(p, p->v, l, block, pos % KV_BLOCK);
        const float *kn = p->k_new + i * m->kv_dim, *vn = p->v_new + i * m->kv_dim;
        infer_kv_store(m, kn, k, 1);
        infer_kv_store(m, vn, v, 1);
    }
}

static void step_attend(void *ctx, long l, long n) {
    const step *s = ctx;
    cf_infer_model *m = s->m;
    store_rows(m, s->p, s->segs, l, n);
    paged_job job = {.m = m, .p = s->p, .segs = s->segs, .layer = l};
    long tasks = n * m->cfg.num_heads;
    if (cf_num_threads() == 1 || tasks < 2)
        for (long t = 0; t < tasks; t++) attend(&job, (int)t, 0);
    else
        cf_parallel_for((int)tasks, attend, &job);
}

int infer_forward_paged(cf_infer_model *m, infer_kv_pool *p, const infer_segment *segs, int n_segs, cf_error *err) {
    long n = 0;
    for (int s = 0; s < n_segs; s++) {
        const infer_segment *g = &segs[s];
        if (g->n < 1 || g->pos < 0 || g->pos + g->n > m->max_seq)
            return cf_fail(err, "positions %ld..%ld do not fit the context of %ld tokens", g->pos, g->pos + g->n - 1,
                           m->max_seq);
        if (n + g->n > INFER_CHUNK)
            return cf_fail(err, "a batched step takes at most %d tokens", (int)INFER_CHUNK);
        for (long t = 0; t < g->n; t++) {
            if (g->tokens[t] < 0 || g->tokens[t] >= m->vocab)
                return cf_fail(err, "token %d is outside the vocabulary of %ld", g->tokens[t], m->vocab);
            p->tokens[n] = g->tokens[t], p->positions[n] = (int32_t)(g->pos + t), p->seg_of[n] = s;
            n++;
        }
    }
    if (n == 0) return 0;
    if (cf_num_threads() > m->score_threads) infer_alloc_thread_scratch(m);
    unsigned fp_mode = cf_denormals_off();
    step st = {.m = m, .p = p, .segs = segs};
    infer_path path = {.ctx = &st, .linears = step_linears, .kv_rows = step_kv_rows, .attend = step_attend,
                       .positions = p->positions, .pos = 0};
    infer_embed(m, p->tokens, n, p->positions, 0);
    for (long l = 0; l < m->cfg.num_layers; l++) infer_block(m, l, n, &path);
    /* the last token of each segment that wants logits, normalised into xb and projected */
    long rows = 0, last = -1;
    for (int s = 0; s < n_segs; s++) {
        last += segs[s].n;
        if (!segs[s].logits) continue;
        infer_final_norm(m, m->x + last * m->dim, m->xb + rows * m->dim, 1);
        rows++;
    }
    if (rows) {
        const infer_linear *head = &m->lm_head;
        linears(p, &head, &p->logits, 1, m->xb, rows);
        rows = 0;
        for (int s = 0; s < n_segs; s++)
            if (segs[s].logits)
                memcpy(segs[s].logits, p->logits + rows++ * m->vocab, sizeof(float) * (size_t)m->vocab);
    }
    cf_fp_mode_restore(fp_mode);
    return 0;
}
