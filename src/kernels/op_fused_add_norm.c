/* add_rmsnorm and add_layernorm: the residual add and the norm that reads its sum, in
 * one pass per row: h = x + r (the residual stream, still read by later adds), then the
 * norm of that row while it is in cache, instead of writing h and reading it back in a
 * second pass over memory. The norm of a row is the unfused kernel's own
 * (cf_rmsnorm_row, cf_layernorm_row), so the results are bit-identical to add + norm.
 *
 * add_rmsnorm:   inputs (x, r, w [D]),         outputs (h, y, rstd [rows])
 * add_layernorm: inputs (x, r, w [D], b [D]),  outputs (h, y, mean [rows], rstd [rows])
 * attrs.f[0] = eps. The backward is the built-in norm backward on h, plus the gradient h
 * gets from its other readers; x and r both receive that sum. */
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct add_norm_job {
    const float *x, *r, *w, *b;
    float *h, *y, *mean, *rstd; /* mean: add_layernorm only */
    long dim;
    float eps;
} add_norm_job;

/* The norm's parameters (w, and b for LayerNorm) follow x and r. */
static int n_norm_params(const cf_node *n) { return n->n_inputs - 2; }

static int infer_add_norm(cf_node *n, cf_error *err) {
    for (int i = 0; i < n->n_inputs; i++)
        if (cf_require_dtype(n, i, CF_F32, err)) return -1;
    if (cf_require_same_shape(n, 0, 1, err)) return -1;
    const cf_tensor *x = n->inputs[0];
    for (int i = 2; i < n->n_inputs; i++)
        if (n->inputs[i]->ndim != 1 || n->inputs[i]->shape[0] != cf_tensor_cols(x))
            return cf_fail(err, "norm parameter %s must be [%lld]", n->inputs[i]->name, (long long)cf_tensor_cols(x));
    cf_node_output_like(n, 0, x);
    cf_node_output_like(n, 1, x);
    int64_t rows[1] = {cf_tensor_rows(x)};
    for (int k = 2; k < n->op->n_outputs; k++) cf_node_output(n, k, CF_F32, 1, rows);
    return 0;
}

static void add_norm_rows(void *arg, long begin, long end) {
    const add_norm_job *j = arg;
    long d = j->dim;
    for (long row = begin; row < end; row++) {
        const float *x = j->x + row * d, *r = j->r + row * d;
        float *h = j->h + row * d, *y = j->y + row * d;
        for (long i = 0; i < d; i++) h[i] = x[i] + r[i];
        if (j->mean)
            cf_layernorm_row(h, j->w, j->b, y, d, j->eps, &j->mean[row], &j->rstd[row]);
        else
            j->rstd[row] = cf_rmsnorm_row(h, j->w, y, d, j->eps);
    }
}

static void add_norm_forward(const cf_node *n) {
    bool layer = n_norm_params(n) == 2;
    add_norm_job j = {.x = cf_in(n, 0), .r = cf_in(n, 1), .w = cf_in(n, 2), .b = layer ? cf_in(n, 3) : NULL,
                      .h = cf_out(n, 0), .y = cf_out(n, 1), .mean = layer ? cf_out(n, 2) : NULL,
                      .rstd = cf_out(n, layer ? 3 : 2), .dim = (long)cf_tensor_cols(n->inputs[0]),
                      .eps = (float)n->attrs.f[0]};
    cf_parallel_rows((long)cf_tensor_rows(n->inputs[0]), j.dim * 4, add_norm_rows, &j);
}

/* The norm backward's inputs are (dy, h, w, then the saved statistics): rmsnorm_backward
 * (dy, h, w, rstd), layernorm_backward (dy, h, w, mean, rstd); its outputs (dh, dw[, db])
 * give the gradients of inputs (x and r, w[, b]). */
static void add_norm_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *dh = dy[0];
    if (dy[1]) {
        bool layer = n_norm_params(n) == 2;
        cf_tensor *in[5] = {dy[1], n->outputs[0], n->inputs[2], n->outputs[2], n->outputs[3]};
        cf_node *b = cf_graph_node_add(g, layer ? &cf_op_layernorm_backward : &cf_op_rmsnorm_backward, in,
                                       n->n_outputs + 1, NULL);
        if (!b) return;
        dh = dh ? cf_nn_add(g, dh, b->outputs[0]) : b->outputs[0];
        for (int k = 1; k < b->n_outputs; k++) dx[k + 1] = b->outputs[k];
    }
    dx[0] = dx[1] = dh;
}

const cf_op_def cf_op_add_rmsnorm = {.name = "add_rmsnorm", .n_outputs = 3, .infer = infer_add_norm,
                                     .kernels[CF_BACKEND_CPU] = add_norm_forward, .backward = add_norm_backward};
const cf_op_def cf_op_add_layernorm = {.name = "add_layernorm", .n_outputs = 4, .infer = infer_add_norm,
                                       .kernels[CF_BACKEND_CPU] = add_norm_forward, .backward = add_norm_backward};
