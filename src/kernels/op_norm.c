/* rmsnorm and layernorm graph ops. The forward kernels are the shared primitives in
 * kernels.h (which also save rstd / mean); the backward kernels are here.
 *
 * Backward weight (and bias) gradients are reductions over rows: each of a fixed number
 * of row chunks writes its partial sums to the workspace and the partials are added in
 * chunk order, so results do not depend on the thread count. */
#include <string.h>

#include "cformers/threads.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct norm_bwd_job {
    const float *dy, *x, *w, *mean, *rstd;
    float *dx, *dw, *db; /* db: layernorm only */
    float *partial;      /* [chunks, n_sums * dim] */
    long rows, dim, chunks;
    int n_sums; /* 1 (rmsnorm: dw) or 2 (layernorm: dw, db) */
    unsigned accumulate; /* node->accumulate: bit 1 dw, bit 2 db add instead of overwrite */
} norm_bwd_job;

static void rmsnorm_bwd_rows(const norm_bwd_job *j, long begin, long end, float *dw) {
    long d = j->dim;
    for (long r = begin; r < end; r++) {
        const float *dy = j->dy + r * d, *x = j->x + r * d;
        float *dx = j->dx + r * d, rstd = j->rstd[r];
        float dot = 0.0f; /* sum_k w_k dy_k x_k */
        for (long i = 0; i < d; i++) {
            dot += j->w[i] * dy[i] * x[i];
            dw[i] += dy[i] * x[i] * rstd;
        }
        float c = rstd * rstd * rstd * dot / (float)d;
        for (long i = 0; i < d; i++) dx[i] = rstd * j->w[i] * dy[i] - c * x[i];
    }
}

static void layernorm_bwd_rows(const norm_bwd_job *j, long begin, long end, float *dw) {
    long d = j->dim;
    float *db = dw + d;
    for (long r = begin; r < end; r++) {
        const float *dy = j->dy + r * d, *x = j->x + r * d;
        float *dx = j->dx + r * d, mean = j->mean[r], rstd = j->rstd[r];
        float sum_g = 0.0f, sum_gx = 0.0f; /* g = dy * w, over xhat = (x - mean) * rstd */
        for (long i = 0; i < d; i++) {
            float xhat = (x[i] - mean) * rstd, gi = dy[i] * j->w[i];
            sum_g += gi;
            sum_gx += gi * xhat;
            dw[i] += dy[i] * xhat;
            db[i] += dy[i];
        }
        float mg = sum_g / (float)d, mgx = sum_gx / (float)d;
        for (long i = 0; i < d; i++) dx[i] = rstd * (dy[i] * j->w[i] - mg - (x[i] - mean) * rstd * mgx);
    }
}

static void bwd_chunk(void *arg, int chunk, int thread) {
    const norm_bwd_job *j = arg;
    long begin, end;
    cf_split_range(j->rows, (int)j->chunks, chunk, &begin, &end);
    float *partial = j->partial + chunk * j->n_sums * j->dim;
    memset(partial, 0, sizeof(float) * (size_t)(j->n_sums * j->dim));
    if (j->n_sums == 1)
        rmsnorm_bwd_rows(j, begin, end, partial);
    else
        layernorm_bwd_rows(j, begin, end, partial);
}

static void reduce_columns(void *arg, long begin, long end) {
    const norm_bwd_job *j = arg;
    long width = j->n_sums * j->dim;
    for (long c = begin; c < end; c++) {
        float s = 0.0f;
        for (long k = 0; k < j->chunks; k++) s += j->partial[k * width + c];
        bool is_w = c < j->dim;
        float *dst = is_w ? &j->dw[c] : &j->db[c - j->dim];
        *dst = (j->accumulate >> (is_w ? 1 : 2) & 1u) ? *dst + s : s;
    }
}

static void run_norm_backward(norm_bwd_job *j) {
    cf_parallel_for((int)j->chunks, bwd_chunk, j);
    cf_parallel_rows(j->n_sums * j->dim, j->chunks, reduce_columns, j);
}

static size_t norm_bwd_workspace(const cf_node *n, int n_sums) {
    long rows = (long)cf_tensor_rows(n->inputs[1]), dim = (long)cf_tensor_cols(n->inputs[1]);
    return sizeof(float) * (size_t)(cf_reduce_chunks(rows) * n_sums * dim);
}

/* Checks x (input 0) against weight (and bias) [dim]; outputs y like x plus `stats`
 * per-row statistics shaped like x without its last dimension. */
static int infer_norm(cf_node *n, int n_params, int stats, cf_error *err) {
    const cf_tensor *x = n->inputs[0];
    for (int i = 0; i <= n_params; i++)
        if (cf_require_dtype(n, i, CF_F32, err)) return -1;
    for (int i = 1; i <= n_params; i++)
        if (n->inputs[i]->ndim != 1 || n->inputs[i]->shape[0] != cf_tensor_cols(x))
            return cf_fail(err, "%s must be [%lld] to normalise %s", n->inputs[i]->name, (long long)cf_tensor_cols(x),
                           x->name);
    cf_node_output_like(n, 0, x);
    for (int k = 1; k <= stats; k++) cf_node_output(n, k, CF_F32, x->ndim - 1, x->shape);
    return 0;
}

/* ---- rmsnorm: inputs (x, w), outputs (y, rstd), attrs.f[0] = eps ---- */

static int infer_rmsnorm(cf_node *n, cf_error *err) { return infer_norm(n, 1, 1, err); }

static void rmsnorm_forward(const cf_node *n) {
    const cf_tensor *x = n->inputs[0];
    cf_rmsnorm(cf_in(n, 0), cf_in(n, 1), cf_out(n, 0), cf_out(n, 1), (long)cf_tensor_rows(x),
               (long)cf_tensor_cols(x), (float)n->attrs.f[0]);
}

static void rmsnorm_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *in[4] = {dy[0], n->inputs[0], n->inputs[1], n->outputs[1]};
    cf_node *b = cf_graph_node_add(g, &cf_op_rmsnorm_backward, in, 4, NULL);
    if (!b) return;
    dx[0] = b->outputs[0];
    dx[1] = b->outputs[1];
}

const cf_op_def cf_op_rmsnorm = {.name = "rmsnorm", .n_outputs = 2, .infer = infer_rmsnorm,
                                 .kernels[CF_BACKEND_CPU] = rmsnorm_forward, .backward = rmsnorm_backward};

cf_tensor *cf_nn_rmsnorm(cf_graph *g, cf_tensor *x, cf_tensor *weight, float eps) {
    cf_attrs attrs = {.f = {eps}};
    return cf_op_apply(g, &cf_op_rmsnorm, (cf_tensor *[]){x, weight}, 2, &attrs);
}

/* inputs (dy, x, w, rstd), outputs (dx, dw) */
static int infer_rmsnorm_backward(cf_node *n, cf_error *err) {
    cf_node_output_like(n, 0, n->inputs[1]);
    cf_node_output_like(n, 1, n->inputs[2]);
    return 0;
}

static void rmsnorm_backward_forward(const cf_node *n) {
    long rows = (long)cf_tensor_rows(n->inputs[1]);
    norm_bwd_job j = {.dy = cf_in(n, 0), .x = cf_in(n, 1), .w = cf_in(n, 2), .rstd = cf_in(n, 3),
                      .dx = cf_out(n, 0), .dw = cf_out(n, 1), .partial = n->workspace, .rows = rows,
                      .dim = (long)cf_tensor_cols(n->inputs[1]), .chunks = cf_reduce_chunks(rows), .n_sums = 1,
                      .accumulate = n->accumulate};
    run_norm_backward(&j);
}

static size_t rmsnorm_backward_workspace(const cf_node *n) { return norm_bwd_workspace(n, 1); }

const cf_op_def cf_op_rmsnorm_backward = {.name = "rmsnorm_backward", .n_outputs = 2, .infer = infer_rmsnorm_backward,
                                          .kernels[CF_BACKEND_CPU] = rmsnorm_backward_forward,
                                          .workspace = rmsnorm_backward_workspace, .accumulate_outputs = 2u};

/* ---- layernorm: inputs (x, w, b), outputs (y, mean, rstd), attrs.f[0] = eps ---- */

static int infer_layernorm(cf_node *n, cf_error *err) { return infer_norm(n, 2, 2, err); }

static void layernorm_forward(const cf_node *n) {
    const cf_tensor *x = n->inputs[0];
    cf_layernorm(cf_in(n, 0), cf_in(n, 1), cf_in(n, 2), cf_out(n, 0), cf_out(n, 1), cf_out(n, 2),
                 (long)cf_tensor_rows(x), (long)cf_tensor_cols(x), (float)n->attrs.f[0]);
}

static void layernorm_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *in[5] = {dy[0], n->inputs[0], n->inputs[1], n->outputs[1], n->outputs[2]};
    cf_node *b = cf_graph_node_add(g, &cf_op_layernorm_backward, in, 5, NULL);
    if (!b) return;
    for (int i = 0; i < 3; i++) dx[i] = b->outputs[i];
}

const cf_op_def cf_op_layernorm = {.name = "layernorm", .n_outputs = 3, .infer = infer_layernorm,
                                   .kernels[CF_BACKEND_CPU] = layernorm_forward, .backward = layernorm_backward};

cf_tensor *cf_nn_layernorm(cf_graph *g, cf_tensor *x, cf_tensor *weight, cf_tensor *bias, float eps) {
    cf_attrs attrs = {.f = {eps}};
    return cf_op_apply(g, &cf_op_layernorm, (cf_tensor *[]){x, weight, bias}, 3, &attrs);
}

/* inputs (dy, x, w, mean, rstd), outputs (dx, dw, db) */
static int infer_layernorm_backward(cf_node *n, cf_error *err) {
    cf_node_output_like(n, 0, n->inputs[1]);
    cf_node_output_like(n, 1, n->inputs[2]);
    cf_node_output_like(n, 2, n->inputs[2]);
    return 0;
}

static void layernorm_backward_forward(const cf_node *n) {
    long rows = (long)cf_tensor_rows(n->inputs[1]);
    norm_bwd_job j = {.dy = cf_in(n, 0), .x = cf_in(n, 1), .w = cf_in(n, 2), .mean = cf_in(n, 3),
                      .rstd = cf_in(n, 4), .dx = cf_out(n, 0), .dw = cf_out(n, 1), .db = cf_out(n, 2),
                      .partial = n->workspace, .rows = rows, .dim = (long)cf_tensor_cols(n->inputs[1]),
                      .chunks = cf_reduce_chunks(rows), .n_sums = 2, .accumulate = n->accumulate};
    run_norm_backward(&j);
}

static size_t layernorm_backward_workspace(const cf_node *n) { return norm_bwd_workspace(n, 2); }

const cf_op_def cf_op_layernorm_backward = {.name = "layernorm_backward", .n_outputs = 3,
                                            .infer = infer_layernorm_backward,
                                            .kernels[CF_BACKEND_CPU] = layernorm_backward_forward,
                                            .workspace = layernorm_backward_workspace, .accumulate_outputs = 6u};
