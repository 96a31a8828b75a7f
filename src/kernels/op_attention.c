/* Masked (kernels/attn_mask.h: causal, sliding window, logit soft-cap; the mask in the
 * node's attrs) grouped-query attention, unfused: scores = q k^T / sqrt(hd) through
 * cf_sgemm_strided_batched, masked (soft-capped) softmax, out = probs v. The
 * probabilities are a second output kept for the backward.
 *
 * Layout: q [B, T, H, hd], k and v [B, T, KV, hd], probs [B, H, T, T]. The `rep` = H/KV
 * query heads sharing a kv head are adjacent in memory, so in the forward one batched
 * GEMM with a stride of hd covers them. Work is split over (batch, kv head) groups; the
 * backward goes head by head within a group, with one [T, T] scratch plane per slot. */
#include <math.h>

#include "cformers/gemm.h"
#include "cformers/threads.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct attn_job {
    const float *q, *k, *v, *probs, *dout;
    float *out, *p_out, *dq, *dk, *dv, *scratch; /* scratch: per slot ds [T, T], then (soft-cap) scores [T, T] */
    long batch, seq, heads, kv_heads, hd, rep, slots;
    float scale;
    cf_attn_mask mask;
} attn_job;

static attn_job job_of(const cf_node *n, const cf_tensor *q, const cf_tensor *k) {
    attn_job j = {.batch = (long)q->shape[0], .seq = (long)q->shape[1], .heads = (long)q->shape[2],
                  .kv_heads = (long)k->shape[2], .hd = (long)q->shape[3], .mask = cf_attrs_mask(&n->attrs)};
    j.rep = j.heads / j.kv_heads;
    j.scale = 1.0f / sqrtf((float)j.hd);
    return j;
}

/* Offsets of group (b, g): its first query head, its kv head, its first probs plane. */
static long q_at(const attn_job *j, long b, long g) { return (b * j->seq * j->heads + g * j->rep) * j->hd; }
static long kv_at(const attn_job *j, long b, long g) { return (b * j->seq * j->kv_heads + g) * j->hd; }
static long p_at(const attn_job *j, long b, long g) { return (b * j->heads + g * j->rep) * j->seq * j->seq; }

static int infer_attention(cf_node *n, cf_error *err) {
    cf_attn_mask mask = cf_attrs_mask(&n->attrs);
    if (cf_attn_mask_check(&mask, n->op->name, err)) return -1;
    for (int i = 0; i < 3; i++)
        if (cf_require_dtype(n, i, CF_F32, err)) return -1;
    const cf_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    if (q->ndim != 4 || k->ndim != 4 || cf_require_same_shape(n, 1, 2, err) != 0 || k->shape[0] != q->shape[0] ||
        k->shape[1] != q->shape[1] || k->shape[3] != q->shape[3] || q->shape[2] % k->shape[2] != 0)
        return cf_fail(err, "need q [B, T, H, hd] and k, v [B, T, KV, hd] with H a multiple of KV (%s, %s, %s)",
                       q->name, k->name, v->name);
    cf_node_output_like(n, 0, q);
    int64_t probs[4] = {q->shape[0], q->shape[2], q->shape[1], q->shape[1]};
    cf_node_output(n, 1, CF_F32, 4, probs);
    return 0;
}

static void attention_group(void *arg, int task, int thread) {
    const attn_job *j = arg;
    long b = task / j->kv_heads, g = task % j->kv_heads, T = j->seq, hd = j->hd;
    long ldq = j->heads * hd, ldk = j->kv_heads * hd;
    float *p = j->p_out + p_at(j, b, g);
    cf_sgemm_strided_batched(false, true, T, T, hd, j->scale, j->q + q_at(j, b, g), ldq, hd, j->k + kv_at(j, b, g), ldk,
                             0, 0.0f, p, T, T * T, j->rep);
    cf_softmax_masked(p, j->rep, T, T, 0, &j->mask);
    cf_sgemm_strided_batched(false, false, T, hd, T, 1.0f, p, T, T * T, j->v + kv_at(j, b, g), ldk, 0, 0.0f,
                             j->out + q_at(j, b, g), ldq, hd, j->rep);
}

static void attention_forward(const cf_node *n) {
    attn_job j = job_of(n, n->inputs[0], n->inputs[1]);
    j.q = cf_in(n, 0);
    j.k = cf_in(n, 1);
    j.v = cf_in(n, 2);
    j.out = cf_out(n, 0);
    j.p_out = cf_out(n, 1);
    cf_parallel_for((int)(j.batch * j.kv_heads), attention_group, &j);
}

static void attention_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *in[5] = {dy[0], n->inputs[0], n->inputs[1], n->inputs[2], n->outputs[1]};
    cf_attrs a = {0}; /* the forward's mask; the backward sets its own attrs.i[0] */
    cf_attn_mask mask = cf_attrs_mask(&n->attrs);
    cf_attrs_set_mask(&a, &mask);
    cf_node *b = cf_graph_node_add(g, &cf_op_attention_backward, in, 5, &a);
    if (!b) return;
    for (int i = 0; i < 3; i++) dx[i] = b->outputs[i];
}

const cf_op_def cf_op_attention = {.name = "attention", .n_outputs = 2, .infer = infer_attention,
                                   .kernels[CF_BACKEND_CPU] = attention_forward, .backward = attention_backward};

cf_tensor *cf_nn_attention_masked(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v, const cf_attn_mask *mask) {
    cf_attrs a = {0};
    cf_attrs_set_mask(&a, mask);
    return cf_op_apply(g, &cf_op_attention, (cf_tensor *[]){q, k, v}, 3, &a);
}

cf_tensor *cf_nn_attention(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v) {
    cf_attn_mask causal = cf_mask_causal();
    return cf_nn_attention_masked(g, q, k, v, &causal);
}

/* ---- backward: inputs (dout, q, k, v, probs), outputs (dq, dk, dv) ----
 * With S the scaled scores, C = cap * tanh(S / cap) under a soft-cap (else C = S) and
 * P = softmax(C):
 *   dV = sum over the group's heads P^T dO      dP = dO V^T
 *   dS = P * (dP - rowsum(dP * P)) * C'(S) * scale      dQ = dS K      dK = sum dS^T Q
 * with C'(S) = 1 - tanh^2(S / cap) (1 without a cap; S recomputed for it). */

/* ds [rows, cols] from dP in place; s: the scaled scores under a soft-cap, else NULL. */
static void softmax_backward_rows(float *ds, const float *p, const float *s, long rows, long cols, float scale,
                                  const cf_attn_mask *mask) {
    for (long r = 0; r < rows; r++) {
        float *d = ds + r * cols;
        const float *pr = p + r * cols;
        long live = cf_mask_keys(mask, r % cols, cols); /* the columns past it have p = 0 */
        long first = cf_mask_first_key(mask, r % cols); /* and those before it (a window) */
        float dot = 0.0f;
        for (long c = 0; c < first; c++) d[c] = 0.0f;
        for (long c = first; c < live; c++) dot += d[c] * pr[c];
        if (s) {
            float inv = 1.0f / mask->softcap;
            for (long c = first; c < live; c++) {
                float t = tanhf(s[r * cols + c] * inv);
                d[c] = pr[c] * (d[c] - dot) * (1.0f - t * t) * scale;
            }
        } else {
            for (long c = first; c < live; c++) d[c] = pr[c] * (d[c] - dot) * scale;
        }
        for (long c = live; c < cols; c++) d[c] = 0.0f;
    }
}

/* One kv group, head by head so the scratch holds one [T, T] plane; dK and dV sum
 * over the group's heads. */
static void attention_backward_group(const attn_job *j, long b, long g, float *ds, float *s) {
    long T = j->seq, hd = j->hd, ldq = j->heads * hd, ldk = j->kv_heads * hd;
    const float *k = j->k + kv_at(j, b, g), *v = j->v + kv_at(j, b, g);
    float *dv = j->dv + kv_at(j, b, g), *dk = j->dk + kv_at(j, b, g);
    for (long r = 0; r < j->rep; r++) {
        const float *p = j->probs + p_at(j, b, g) + r * T * T;
        const float *dout = j->dout + q_at(j, b, g) + r * hd, *q = j->q + q_at(j, b, g) + r * hd;
        float beta = r ? 1.0f : 0.0f;
        cf_sgemm(true, false, T, hd, T, 1.0f, p, T, dout, ldq, beta, dv, ldk);
        cf_sgemm(false, true, T, T, hd, 1.0f, dout, ldq, v, ldk, 0.0f, ds, T);
        if (s) cf_sgemm(false, true, T, T, hd, j->scale, q, ldq, k, ldk, 0.0f, s, T);
        softmax_backward_rows(ds, p, s, T, T, j->scale, &j->mask);
        cf_sgemm(false, false, T, hd, T, 1.0f, ds, T, k, ldk, 0.0f, j->dq + q_at(j, b, g) + r * hd, ldq);
        cf_sgemm(true, false, T, hd, T, 1.0f, ds, T, q, ldq, beta, dk, ldk);
    }
}

/* [T, T] scratch planes per slot: ds, and the recomputed scores under a soft-cap. */
static long planes_per_slot(const cf_attn_mask *m) { return m->softcap != 0 ? 2 : 1; }

/* Slot s (one scratch area) handles groups s, s + slots, ... */
static void attention_backward_slot(void *arg, int slot, int thread) {
    const attn_job *j = arg;
    long plane = j->seq * j->seq;
    float *ds = j->scratch + slot * plane * planes_per_slot(&j->mask), *s = j->mask.softcap != 0 ? ds + plane : NULL;
    for (long task = slot; task < j->batch * j->kv_heads; task += j->slots)
        attention_backward_group(j, task / j->kv_heads, task % j->kv_heads, ds, s);
}

/* attrs.i[0] = scratch slots, one per thread the pool had when the graph was built
 * (at most one per group); any thread count runs correctly with them. */
static int infer_attention_backward(cf_node *n, cf_error *err) {
    for (int i = 0; i < 3; i++) cf_node_output_like(n, i, n->inputs[i + 1]);
    attn_job j = job_of(n, n->inputs[1], n->inputs[2]);
    long groups = j.batch * j.kv_heads, threads = cf_num_threads();
    n->attrs.i[0] = groups < threads ? groups : threads;
    return 0;
}

static void attention_backward_forward(const cf_node *n) {
    attn_job j = job_of(n, n->inputs[1], n->inputs[2]);
    j.dout = cf_in(n, 0);
    j.q = cf_in(n, 1);
    j.k = cf_in(n, 2);
    j.v = cf_in(n, 3);
    j.probs = cf_in(n, 4);
    j.dq = cf_out(n, 0);
    j.dk = cf_out(n, 1);
    j.dv = cf_out(n, 2);
    j.scratch = n->workspace;
    j.slots = (long)n->attrs.i[0];
    cf_parallel_for((int)j.slots, attention_backward_slot, &j);
}

static size_t attention_backward_workspace(const cf_node *n) {
    long seq = (long)n->inputs[1]->shape[1];
    cf_attn_mask mask = cf_attrs_mask(&n->attrs);
    return sizeof(float) * (size_t)(n->attrs.i[0] * seq * seq * planes_per_slot(&mask));
}

const cf_op_def cf_op_attention_backward = {.name = "attention_backward", .n_outputs = 3,
                                            .infer = infer_attention_backward,
                                            .kernels[CF_BACKEND_CPU] = attention_backward_forward,
                                            .workspace = attention_backward_workspace};
