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
    long group, groups; /* query heads per task, tasks per token */
    long reserve;       /* floats per position at the start of a thread's scratch, before the scores */
    const cf_attn_mask *mask;
} paged_job;

static const char *row_at(const infer_kv_pool *p, const char *base, long l, int32_t block, long off) {
    return base + (size_t)((l * p->n_blocks + block) * KV_BLOCK + off) * p->row_bytes;
}

/* Bytes [lo, hi) of n rows row_bytes apart, into L2 (a block of the cache is contiguous):
 * the cache is read once per token, from memory, like the weights, and a head's slice of a
 * row is only 2 of its cache lines, too little for the hardware prefetcher to run ahead. */
static void prefetch_rows(const char *row, long n, size_t row_bytes, size_t lo, size_t hi) {
    for (long r = 0; r < n; r++, row += row_bytes)
        for (size_t off = lo & ~(size_t)63; off < hi; off += 64) __builtin_prefetch(row + off, 0, 2);
}

/* Query heads [h0, h0 + group) of token i over the positions it sees (kernels/attn_mask.h;
 * causal: 0 .. pos; under a window k0 .. pos, k0 = pos - W + 1, whose blocks alone are
 * read): scores into s[pos + 1]
 * per head, the results into m->att, with the sums forward.c's decode takes in the same
 * order: an f32 cache read as decode_head_f32 reads it, a bf16 or q8_0 one by the kv_rows
 * kernels (scores a block at a time, the values summed in position order). Bit for bit
 * equal matters beyond tidiness: a difference in the last place can round a later layer's
 * key to another bf16 value. A task takes a group of heads, all of a token's when the step
 * has tokens enough to keep the threads busy, so each block of the cache (KV_BLOCK whole
 * rows, contiguous) is read once for them rather than a head's slice of each row at a time,
 * and the bf16 values are read where they lie, through a table of their rows. */
static void attend(void *arg, int task, int thread) {
    const paged_job *j = arg;
    cf_infer_model *m = j->m;
    const infer_kv_pool *p = j->p;
    long heads = m->cfg.num_heads, i = task / j->groups, h0 = task % j->groups * j->group, hd = m->head_dim;
    long h1 = h0 + j->group < heads ? h0 + j->group : heads, per_kv = heads / m->cfg.num_kv_heads;
    long T = cf_mask_keys(j->mask, p->positions[i], p->positions[i] + 1), l = j->layer;
    long k0 = cf_mask_first_key(j->mask, p->positions[i]); /* keys k0 .. T-1 */
    const int32_t *blocks = j->segs[p->seg_of[i]].blocks;
    /* the thread's scratch (INFER_CHUNK x max_seq floats): reserve x max_seq for the value
     * rows' table or copies, then max_seq scores per head */
    float *scratch = m->scores + (long)thread * INFER_CHUNK * m->max_seq, *s0 = scratch + j->reserve * m->max_seq;
    float scale = 1.0f / sqrtf((float)hd);
#define HEAD_S(h) (s0 + ((h) - h0) * m->max_seq)
#define HEAD_OFF(h) ((size_t)((h) / per_kv) * p->head_bytes)
#define HEAD_Q(h) (m->q + i * m->q_dim + (h) * hd)
#define HEAD_OUT(h) (m->att + i * m->q_dim + (h) * hd)
    size_t lo = HEAD_OFF(h0), hi = HEAD_OFF(h1 - 1) + p->head_bytes; /* the group's bytes of a row */
    for (long t0 = k0 / KV_BLOCK * KV_BLOCK; t0 < T && p->dtype != CF_F32; t0 += KV_BLOCK) {
        long n = T - t0 < KV_BLOCK ? T - t0 : KV_BLOCK;
        const char *k = row_at(p, p->k, l, blocks[t0 / KV_BLOCK], 0);
        if (t0 + KV_BLOCK < T) { /* the next block's keys (all KV_BLOCK rows are allocated) */
            prefetch_rows(row_at(p, p->k, l, blocks[t0 / KV_BLOCK + 1], 0), KV_BLOCK, p->row_bytes, lo, hi);
        }
        prefetch_rows(row_at(p, p->v, l, blocks[t0 / KV_BLOCK], 0), n, p->row_bytes, lo, hi); /* values, for later */
        for (long h = h0; h < h1; h++) {
            if (p->dtype == CF_Q8_0) cf_kv_q8_scores(HEAD_Q(h), k + HEAD_OFF(h), p->row_bytes, n, hd, scale, HEAD_S(h) + t0);
            else cf_kv_bf16_scores(HEAD_Q(h), (const cf_bf16 *)(k + HEAD_OFF(h)), p->kv_dim, n, hd, scale, HEAD_S(h) + t0);
        }
    }
    if (p->dtype == CF_BF16) {
        const void **table = (const void **)scratch; /* value row t where it lies */
        for (long t = k0; t < T; t++) table[t - k0] = row_at(p, p->v, l, blocks[t / KV_BLOCK], t % KV_BLOCK);
        for (long h = h0; h < h1; h++) {
            cf_mask_softcap(j->mask, HEAD_S(h) + k0, T - k0);
            cf_softmax(HEAD_S(h) + k0, 1, T - k0);
            cf_kv_bf16_weighted_sum_rows(HEAD_S(h) + k0, table, HEAD_OFF(h), T - k0, hd, HEAD_OUT(h));
        }
        return;
    }
    for (long h = h0; h < h1; h++) {
        float *s = HEAD_S(h), *out = HEAD_OUT(h);
        if (p->dtype == CF_Q8_0) {
            cf_mask_softcap(j->mask, s + k0, T - k0);
            cf_softmax(s + k0, 1, T - k0);
            char *rows = (char *)scratch; /* the head's value rows gathered: T - k0 slices of head_bytes */
            for (long t = k0; t < T; t++)
                memcpy(rows + (size_t)(t - k0) * p->head_bytes,
                       row_at(p, p->v, l, blocks[t / KV_BLOCK], t % KV_BLOCK) + HEAD_OFF(h), p->head_bytes);
            cf_kv_q8_weighted_sum(s + k0, rows, p->head_bytes, T - k0, hd, out);
            continue;
        }
        for (long t = k0; t < T; t++)
            s[t] = cf_infer_dot(HEAD_Q(h), (const float *)(row_at(p, p->k, l, blocks[t / KV_BLOCK], t % KV_BLOCK) + HEAD_OFF(h)), hd) *
                   scale;
        cf_mask_softcap(j->mask, s + k0, T - k0);
        cf_softmax(s + k0, 1, T - k0);
        memset(out, 0, sizeof(float) * (size_t)hd);
        for (long t = k0; t < T; t++) {
            const float *v = (const float *)(row_at(p, p->v, l, blocks[t / KV_BLOCK], t % KV_BLOCK) + HEAD_OFF(h));
            for (long d = 0; d < hd; d++) out[d] += s[t] * v[d];
        }
    }
#undef HEAD_S
#undef HEAD_OFF
#undef HEAD_Q
#undef HEAD_OUT
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
    cf_infer_matvec_batch(parts, count, L[0]->dtype, x, n, L[0]->in, p->pairs);
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
        cf_infer_kv_store(m, kn, k, 1);
        cf_infer_kv_store(m, vn, v, 1);
    }
}

static void step_attend(void *ctx, long l, long n, const cf_attn_mask *mask) {
    const step *s = ctx;
    cf_infer_model *m = s->m;
    store_rows(m, s->p, s->segs, l, n);
    infer_kv_pool *p = s->p;
    long heads = m->cfg.num_heads, threads = cf_num_threads();
    /* a thread's scratch starts with the value rows' table (bf16: a pointer per position) or
     * their copies (q8_0: head_bytes per position); the rest holds a group's scores */
    long reserve = p->dtype == CF_BF16 ? (long)(sizeof(void *) / sizeof(float))
                   : p->dtype == CF_Q8_0 ? (long)((p->head_bytes + sizeof(float) - 1) / sizeof(float))
                                         : 0;
    long cap = INFER_CHUNK - reserve, want = (4 * threads + n - 1) / n; /* ~4 tasks per thread */
    long groups = want < 1 ? 1 : want > heads ? heads : want, group = (heads + groups - 1) / groups;
    if (group > cap) group = cap;
    paged_job job = {.m = m, .p = p, .segs = s->segs, .layer = l, .group = group,
                     .groups = (heads + group - 1) / group, .reserve = reserve, .mask = mask};
    long tasks = n * job.groups;
    if (cf_num_threads() == 1 || tasks < 2)
        for (long t = 0; t < tasks; t++) attend(&job, (int)t, 0);
    else
        cf_parallel_for((int)tasks, attend, &job);
}

int cf_infer_forward_paged(cf_infer_model *m, infer_kv_pool *p, const infer_segment *segs, int n_segs, cf_error *err) {
    long n = 0;
    for (int s = 0; s < n_segs; s++) {
        const infer_segment *g = &segs[s];
        if (g->n < 1 || g->pos < 0 || g->pos + g->n > m->max_seq)
            return cf_fail(err, "positions %ld..%ld do not fit the context of %ld tokens", g->pos, g->pos + g->n - 1,
                           m->max_seq);
        if (n + g->n > INFER_CHUNK)
            return cf_fail(err, "a batched step takes at most %d tokens", (int)INFER_CHUNK);
        if (g->lora < 0 || g->lora > m->n_served)
            return cf_fail(err, "adapter %d is not among the model's %d served adapters", g->lora, m->n_served);
        for (long t = 0; t < g->n; t++) {
            if (g->tokens[t] < 0 || g->tokens[t] >= m->vocab)
                return cf_fail(err, "token %d is outside the vocabulary of %ld", g->tokens[t], m->vocab);
            p->tokens[n] = g->tokens[t], p->positions[n] = (int32_t)(g->pos + t), p->seg_of[n] = s;
            p->lora_of[n] = g->lora;
            n++;
        }
    }
    if (n == 0) return 0;
    if (cf_num_threads() > m->score_threads) cf_infer_alloc_thread_scratch(m);
    unsigned fp_mode = cf_denormals_off();
    step st = {.m = m, .p = p, .segs = segs};
    infer_path path = {.ctx = &st, .linears = step_linears, .kv_rows = step_kv_rows, .attend = step_attend,
                       .positions = p->positions, .pos = 0, .lora_of = p->lora_of};
    cf_infer_embed(m, p->tokens, n, p->positions, 0);
    for (long l = 0; l < m->cfg.num_layers; l++) cf_infer_block(m, l, n, &path);
    /* the last token of each segment that wants logits, normalised into xb and projected */
    long rows = 0, last = -1;
    for (int s = 0; s < n_segs; s++) {
        last += segs[s].n;
        if (!segs[s].logits) continue;
        cf_infer_final_norm(m, m->x + last * m->dim, m->xb + rows * m->dim, 1);
        rows++;
    }
    if (rows) {
        const infer_linear *head = &m->lm_head;
        linears(p, &head, &p->logits, 1, m->xb, rows);
        cf_infer_logit_softcap(m, p->logits, rows);
        rows = 0;
        for (int s = 0; s < n_segs; s++)
            if (segs[s].logits)
                memcpy(segs[s].logits, p->logits + rows++ * m->vocab, sizeof(float) * (size_t)m->vocab);
    }
    cf_fp_mode_restore(fp_mode);
    return 0;
}
