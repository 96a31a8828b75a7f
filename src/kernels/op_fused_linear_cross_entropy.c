/* linear_cross_entropy: the output projection, softmax and cross-entropy of a language
 * model head as one op that holds one chunk of logits, never their gradient for all
 * tokens (the unfused pair keeps both).
 *
 * Tokens are taken a chunk at a time (cf_cross_entropy_chunk_rows: within 64 MiB, at
 * least 256 rows): logits = x W^T for the chunk, then per row the
 * log-sum-exp, the loss lse - logit[target], and in place d loss / d logits =
 * (softmax - onehot) / n_valid; from those dx = dlogits W and dW += dlogits^T x. So the
 * forward computes the gradients too (three products, as forward + backward unfused
 * do) for d loss = 1, and the backward only scales them by the incoming d loss. Memory:
 * one chunk of logits instead of the logits and their gradient for every token.
 *
 * The weight's gradient goes straight into the gradient block when the backward's seed
 * is known before the forward runs (an input or a constant, as the training step's loss
 * scale: the loss is the graph's output): the backward rule then hands the forward the
 * seed s and the graph's grads_on flag (inputs 3 and 4), and the forward adds s dW into
 * the block (autodiff marks output 2 as the parameter's gradient), so the [V, D]
 * gradient never lies in the activation arena, whose peak is this node. With grads_on 0
 * (a forward alone: an evaluation) the forward makes only the loss.
 *
 * x and W are both f32 or both bf16 (bf16 mixed precision, pass_precision.c): then the
 * three products take bf16 operands and sum in f32; the logits, softmax and loss are f32
 * and so are both gradients. The logits' gradient, which the two backward products read
 * in bf16, is stored in bf16 for the whole chunk, and the f32 logits are made for a
 * part of the chunk at a time (BF16_PART_ROWS): a chunk of 512 rows over 32000 classes
 * takes 46.9 MiB instead of 62.5.
 *
 * inputs (x [..., D], W [V, D], targets [...] i32, negative = ignored[, s [], grads_on []]);
 * outputs (loss [], dx for d loss = 1 [..., D], dW for d loss = s [V, D]), all f32. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/fused.h"
#include "cformers/gemm.h"
#include "core/graph_internal.h"
#include "kernels/context/context.h"
#include "kernels/exp_rows.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct lce_job {
    const cf_tensor *targets_tensor;
    const int32_t *targets;
    float *logits, *row_loss;
    long vocab, row0;
    float inv_valid;
} lce_job;

enum { CHUNK_BYTES = 64 << 20, MIN_CHUNK_ROWS = 256, BF16_PART_ROWS = 128 };

long cf_cross_entropy_chunk_rows(long tokens, long vocab) {
    long most = CHUNK_BYTES / ((long)sizeof(float) * (vocab > 0 ? vocab : 1));
    if (most < MIN_CHUNK_ROWS) most = MIN_CHUNK_ROWS;
    if (tokens <= most) return tokens > 0 ? tokens : 1;
    long chunks = (tokens + most - 1) / most;
    return (tokens + chunks - 1) / chunks;
}

/* attrs.i[0]: rows per chunk when set (tests), else the rule above. */
static long chunk_rows(const cf_node *n) {
    long rows = (long)cf_tensor_rows(n->inputs[0]);
    if (n->attrs.i[0] > 0) return n->attrs.i[0] < rows ? (long)n->attrs.i[0] : rows;
    return cf_cross_entropy_chunk_rows(rows, (long)n->inputs[1]->shape[0]);
}

/* Rows of a part of the logits with bf16 operands: at most BF16_PART_ROWS of a chunk. */
static long part_rows(long chunk) { return chunk < BF16_PART_ROWS ? chunk : BF16_PART_ROWS; }

static size_t align64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

size_t cf_cross_entropy_logits_bytes(long chunk, long vocab, cf_dtype dtype) {
    if (dtype == CF_BF16)
        return align64(sizeof(float) * (size_t)(part_rows(chunk) * vocab)) +
               align64(sizeof(cf_bf16) * (size_t)(chunk * vocab));
    return align64(sizeof(float) * (size_t)(chunk * vocab));
}

/* Workspace bytes before the per-row losses: the logits of a chunk (see the top). */
static size_t logits_bytes(const cf_node *n, long chunk) {
    return cf_cross_entropy_logits_bytes(chunk, (long)n->inputs[1]->shape[0], n->inputs[0]->dtype);
}

static int infer_linear_cross_entropy(cf_node *n, cf_error *err) {
    const cf_tensor *x = n->inputs[0], *w = n->inputs[1], *t = n->inputs[2];
    if (x->dtype != CF_F32 && x->dtype != CF_BF16)
        return cf_fail(err, "linear_cross_entropy: %s is %s (f32 or bf16)", x->name, cf_dtype_name(x->dtype));
    if (cf_require_dtype(n, 1, x->dtype, err) || cf_require_dtype(n, 2, CF_I32, err)) return -1;
    if (w->ndim != 2 || w->shape[1] != cf_tensor_cols(x))
        return cf_fail(err, "weight %s must be [vocab, %lld] for input %s", w->name, (long long)cf_tensor_cols(x),
                       x->name);
    if (cf_tensor_numel(t) != cf_tensor_rows(x))
        return cf_fail(err, "targets %s must have one id per row of %s", t->name, x->name);
    cf_node_output(n, 0, CF_F32, 0, NULL);
    cf_node_output(n, 1, CF_F32, x->ndim, x->shape);
    cf_node_output(n, 2, CF_F32, w->ndim, w->shape);
    return 0;
}

/* Rows of one logits chunk: loss, then the logits become their gradient. */
static void lce_rows(void *arg, long begin, long end) {
    lce_job *j = arg;
    const cf_exp_rows *k = cf_kernels()->exp_rows;
    for (long r = begin; r < end; r++) {
        float *x = j->logits + r * j->vocab;
        int32_t t = j->targets[j->row0 + r];
        if (t >= j->vocab) { /* reported (the run stops after this node), then ignored */
            cf_kernel_fail("target id %d at row %ld of %s is outside the vocabulary of %ld", t, j->row0 + r,
                           j->targets_tensor->name, j->vocab);
            t = -1;
        }
        float lse = cf_log_sum_exp(k, x, j->vocab), scale = t < 0 ? 0.0f : j->inv_valid;
        j->row_loss[j->row0 + r] = t < 0 ? 0.0f : lse - x[t];
        k->exp_scale(x, x, j->vocab, lse, scale);
        if (t >= 0) x[t] -= scale;
    }
}

/* What the gradient products do: whether they run (grads_on), dW's scale, and whether
 * dW adds into the gradient block. */
typedef struct lce_grads {
    bool on, add;
    float scale;
} lce_grads;

static lce_grads grads_of(const cf_node *n) {
    bool folded = n->n_inputs > 3;
    return (lce_grads){.on = !folded || *cf_in(n, 4) != 0.0f, .add = n->accumulate >> 2 & 1u,
                       .scale = folded ? *cf_in(n, 3) : 1.0f};
}

/* The chunks with bf16 x and W. Per part of a chunk: its f32 logits, the loss and the
 * logits' gradient, rounded into the chunk's bf16 gradient (workspace after the part's
 * logits); then the two backward products read that. */
static void forward_bf16(const cf_node *n, lce_job *j, long rows, long dim, long vocab, long chunk, lce_grads gr) {
    const cf_bf16 *xs = n->inputs[0]->data, *w = n->inputs[1]->data;
    long part = part_rows(chunk);
    cf_bf16 *dlogits = (cf_bf16 *)((char *)j->logits + align64(sizeof(float) * (size_t)(part * vocab)));
    float *dx = cf_out(n, 1), *dw = cf_out(n, 2);
    for (long r0 = 0; r0 < rows; r0 += chunk) {
        long m = rows - r0 < chunk ? rows - r0 : chunk;
        for (long p0 = 0; p0 < m; p0 += part) {
            long mp = m - p0 < part ? m - p0 : part;
            j->row0 = r0 + p0;
            cf_gemm_bf16(false, true, mp, vocab, dim, 1.0f, xs + (r0 + p0) * dim, dim, w, dim, 0.0f, j->logits, vocab);
            cf_parallel_rows(mp, vocab * 4, lce_rows, j);
            if (!gr.on) continue;
            cf_parallel_narrow(j->logits, dlogits + p0 * vocab, CF_BF16, mp * vocab);
        }
        if (!gr.on) continue;
        cf_gemm_bf16(false, false, m, dim, vocab, 1.0f, dlogits, vocab, w, dim, 0.0f, dx + r0 * dim, dim);
        cf_gemm_bf16(true, false, vocab, dim, m, gr.scale, dlogits, vocab, xs + r0 * dim, dim, r0 || gr.add ? 1.0f : 0.0f,
                     dw, dim);
    }
}

static void linear_cross_entropy_forward(const cf_node *n) {
    const cf_tensor *x = n->inputs[0], *t = n->inputs[2];
    long rows = (long)cf_tensor_rows(x), dim = (long)cf_tensor_cols(x), vocab = (long)n->inputs[1]->shape[0];
    long chunk = chunk_rows(n), valid = 0;
    const int32_t *targets = cf_tensor_i32(t);
    for (long r = 0; r < rows; r++) valid += targets[r] >= 0;
    lce_job j = {.targets_tensor = t, .targets = targets, .logits = n->workspace, .vocab = vocab,
                 .inv_valid = valid ? 1.0f / (float)valid : 0.0f};
    j.row_loss = (float *)((char *)n->workspace + logits_bytes(n, chunk));
    lce_grads gr = grads_of(n);
    float *dx = cf_out(n, 1), *dw = cf_out(n, 2);
    if (x->dtype == CF_BF16) {
        forward_bf16(n, &j, rows, dim, vocab, chunk, gr);
    } else {
        const float *xs = cf_in(n, 0), *w = cf_in(n, 1);
        for (long r0 = 0; r0 < rows; r0 += chunk) {
            long m = rows - r0 < chunk ? rows - r0 : chunk;
            j.row0 = r0;
            cf_sgemm(false, true, m, vocab, dim, 1.0f, xs + r0 * dim, dim, w, dim, 0.0f, j.logits, vocab);
            cf_parallel_rows(m, vocab * 4, lce_rows, &j);
            if (!gr.on) continue;
            cf_sgemm(false, false, m, dim, vocab, 1.0f, j.logits, vocab, w, dim, 0.0f, dx + r0 * dim, dim);
            cf_sgemm(true, false, vocab, dim, m, gr.scale, j.logits, vocab, xs + r0 * dim, dim, r0 || gr.add ? 1.0f : 0.0f,
                     dw, dim);
        }
    }
    double total = 0.0; /* in row order: deterministic */
    for (long r = 0; r < rows; r++) total += j.row_loss[r];
    *cf_out(n, 0) = valid ? (float)(total / (double)valid) : 0.0f;
}

static size_t linear_cross_entropy_workspace(const cf_node *n) {
    return logits_bytes(n, chunk_rows(n)) + sizeof(float) * (size_t)cf_tensor_rows(n->inputs[0]);
}

/* ---- scale_by: inputs (s [], x), output s * x: the saved gradients times d loss; for the
 * weight's, added straight into the gradient block (accumulate), so the backward holds no
 * second copy of the [V, D] gradient ---- */

static int infer_scale_by(cf_node *n, cf_error *err) {
    (void)err;
    cf_node_output_like(n, 0, n->inputs[1]);
    return 0;
}

typedef struct scale_job {
    const float *x;
    float *y, s;
    bool add;
} scale_job;

static void scale_range(void *arg, long begin, long end) {
    scale_job *j = arg;
    if (j->add)
        for (long i = begin; i < end; i++) j->y[i] += j->s * j->x[i];
    else
        for (long i = begin; i < end; i++) j->y[i] = j->s * j->x[i];
}

static void scale_by_forward(const cf_node *n) {
    scale_job j = {.x = cf_in(n, 1), .y = cf_out(n, 0), .s = *cf_in(n, 0), .add = n->accumulate & 1u};
    cf_parallel_rows((long)cf_tensor_numel(n->inputs[1]), 1, scale_range, &j);
}

static const cf_op_def scale_by = {.name = "scale_by", .n_outputs = 1, .infer = infer_scale_by,
                                   .kernels[CF_BACKEND_CPU] = scale_by_forward, .accumulate_outputs = 1u};

/* dx: the saved gradient times d loss. dW: the forward's output itself when the seed
 * d loss is there before the forward runs (no producer), the forward then reading it and
 * the grads_on flag (see the top); else the saved gradient times d loss as well. */
static void linear_cross_entropy_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    if (n->inputs[0]->requires_grad) dx[0] = cf_op_apply(g, &scale_by, (cf_tensor *[]){dy[0], n->outputs[1]}, 2, NULL);
    if (!n->inputs[1]->requires_grad) return;
    cf_node *fwd = cf_graph_node(g, n->index);
    cf_tensor *on = dy[0]->producer || fwd->n_inputs != 3 ? NULL : cf_graph_grads_on(g);
    if (!on) {
        dx[1] = cf_op_apply(g, &scale_by, (cf_tensor *[]){dy[0], n->outputs[2]}, 2, NULL);
        return;
    }
    fwd->inputs[3] = dy[0];
    fwd->inputs[4] = on;
    fwd->n_inputs = 5;
    dx[1] = fwd->outputs[2];
}

const cf_op_def cf_op_linear_cross_entropy = {.name = "linear_cross_entropy", .n_outputs = 3,
                                              .infer = infer_linear_cross_entropy,
                                              .kernels[CF_BACKEND_CPU] = linear_cross_entropy_forward,
                                              .backward = linear_cross_entropy_backward,
                                              .workspace = linear_cross_entropy_workspace, .accumulate_outputs = 4u};

cf_tensor *cf_nn_linear_cross_entropy_chunked(cf_graph *g, cf_tensor *x, cf_tensor *w, cf_tensor *targets,
                                              long chunk_rows) {
    cf_attrs attrs = {.i = {chunk_rows}};
    return cf_op_apply(g, &cf_op_linear_cross_entropy, (cf_tensor *[]){x, w, targets}, 3, &attrs);
}

cf_tensor *cf_nn_linear_cross_entropy(cf_graph *g, cf_tensor *x, cf_tensor *w, cf_tensor *targets) {
    return cf_nn_linear_cross_entropy_chunked(g, x, w, targets, 0);
}
