/* Token cross-entropy, mean over tokens, softmax and NLL fused: per row
 * lse = max + log(sum exp(x - max)) (stable), loss_r = lse - x[target]. lse is saved so
 * the backward is one pass: dlogits = (exp(x - lse) - onehot(target)) * dloss / n_valid.
 * Rows whose target is negative are ignored (PyTorch's ignore_index). */
#include "kernels/context/context.h"
#include "kernels/exp_rows.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct ce_job {
    const cf_tensor *targets_tensor;
    const float *logits, *lse, *dloss;
    const int32_t *targets;
    float *row_loss, *lse_out, *dlogits;
    long vocab;
    float grad_scale;
} ce_job;

/* Row r's target; negative (ignored) for ignore_index and, reported so the run stops
 * after this node, for an id past the vocabulary. */
static long target_of(const ce_job *j, long r) {
    int32_t t = j->targets[r];
    if (t >= j->vocab) {
        cf_kernel_fail("target id %d at row %ld of %s is outside the vocabulary of %ld", t, r, j->targets_tensor->name,
                       j->vocab);
        return -1;
    }
    return t;
}

static long count_valid(const int32_t *targets, long rows) {
    long n = 0;
    for (long r = 0; r < rows; r++) n += targets[r] >= 0;
    return n;
}

/* inputs (logits [..., V], targets [...]), outputs (loss [], lse [...]) */
static int infer_cross_entropy(cf_node *n, cf_error *err) {
    if (cf_require_dtype(n, 0, CF_F32, err) || cf_require_dtype(n, 1, CF_I32, err)) return -1;
    const cf_tensor *x = n->inputs[0], *t = n->inputs[1];
    if (cf_tensor_numel(t) != cf_tensor_rows(x) || t->ndim != x->ndim - 1)
        return cf_fail(err, "targets %s must have the shape of logits %s without its last dimension", t->name, x->name);
    cf_node_output(n, 0, CF_F32, 0, NULL);
    cf_node_output_like(n, 1, t);
    n->outputs[1]->dtype = CF_F32;
    return 0;
}

static void ce_rows(void *arg, long begin, long end) {
    ce_job *j = arg;
    const cf_exp_rows *k = cf_kernels()->exp_rows;
    for (long r = begin; r < end; r++) {
        const float *x = j->logits + r * j->vocab;
        float lse = cf_log_sum_exp(k, x, j->vocab);
        long t = target_of(j, r);
        j->lse_out[r] = lse;
        j->row_loss[r] = t < 0 ? 0.0f : lse - x[t];
    }
}

static void cross_entropy_forward(const cf_node *n) {
    const cf_tensor *x = n->inputs[0], *t = n->inputs[1];
    long rows = (long)cf_tensor_rows(x);
    ce_job j = {.targets_tensor = t, .logits = cf_in(n, 0), .targets = cf_tensor_i32(t), .row_loss = n->workspace,
                .lse_out = cf_out(n, 1), .vocab = (long)cf_tensor_cols(x)};
    cf_parallel_rows(rows, j.vocab * 3, ce_rows, &j);
    double total = 0.0; /* summed in row order: deterministic */
    for (long r = 0; r < rows; r++) total += j.row_loss[r];
    long valid = count_valid(j.targets, rows);
    *cf_out(n, 0) = valid ? (float)(total / (double)valid) : 0.0f;
}

static size_t cross_entropy_workspace(const cf_node *n) { return sizeof(float) * (size_t)cf_tensor_rows(n->inputs[0]); }

static void cross_entropy_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *in[4] = {dy[0], n->inputs[0], n->inputs[1], n->outputs[1]};
    dx[0] = cf_op_apply(g, &cf_op_cross_entropy_backward, in, 4, NULL);
}

const cf_op_def cf_op_cross_entropy = {.name = "cross_entropy", .n_outputs = 2, .infer = infer_cross_entropy,
                                       .kernels[CF_BACKEND_CPU] = cross_entropy_forward,
                                       .backward = cross_entropy_backward, .workspace = cross_entropy_workspace};

cf_tensor *cf_nn_cross_entropy(cf_graph *g, cf_tensor *logits, cf_tensor *targets) {
    return cf_op_apply(g, &cf_op_cross_entropy, (cf_tensor *[]){logits, targets}, 2, NULL);
}

/* ---- backward: inputs (dloss [], logits, targets, lse), output dlogits ---- */

static int infer_cross_entropy_backward(cf_node *n, cf_error *err) {
    cf_node_output_like(n, 0, n->inputs[1]);
    return 0;
}

static void ce_backward_rows(void *arg, long begin, long end) {
    ce_job *j = arg;
    const cf_exp_rows *k = cf_kernels()->exp_rows;
    for (long r = begin; r < end; r++) {
        const float *x = j->logits + r * j->vocab;
        float *d = j->dlogits + r * j->vocab, lse = j->lse[r];
        long t = target_of(j, r);
        if (t < 0) {
            for (long i = 0; i < j->vocab; i++) d[i] = 0.0f;
            continue;
        }
        k->exp_scale(x, d, j->vocab, lse, j->grad_scale);
        d[t] -= j->grad_scale;
    }
}

static void cross_entropy_backward_forward(const cf_node *n) {
    const cf_tensor *x = n->inputs[1], *t = n->inputs[2];
    long rows = (long)cf_tensor_rows(x), valid = count_valid(cf_tensor_i32(t), rows);
    ce_job j = {.targets_tensor = t, .logits = cf_in(n, 1), .targets = cf_tensor_i32(t), .lse = cf_in(n, 3),
                .dlogits = cf_out(n, 0), .vocab = (long)cf_tensor_cols(x),
                .grad_scale = valid ? *cf_in(n, 0) / (float)valid : 0.0f};
    cf_parallel_rows(rows, j.vocab * 2, ce_backward_rows, &j);
}

const cf_op_def cf_op_cross_entropy_backward = {.name = "cross_entropy_backward", .n_outputs = 1,
                                                .infer = infer_cross_entropy_backward,
                                                .kernels[CF_BACKEND_CPU] = cross_entropy_backward_forward};
