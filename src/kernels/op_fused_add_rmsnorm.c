/* add_rmsnorm: the residual add and the RMSNorm that reads it, in one pass per row:
 * h = x + r (the residual stream, still read by later adds) and y = h / rms(h) * w,
 * instead of writing h and reading it back for the norm.
 *
 * inputs (x, r, w [D]), attrs.f[0] = eps; outputs (h, y, rstd per row, saved).
 * The backward is the built-in rmsnorm backward on h, plus the gradient h gets from
 * its other readers; x and r both receive that sum. */
#include <math.h>

#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct add_norm_job {
    const float *x, *r, *w;
    float *h, *y, *rstd;
    long dim;
    float eps;
} add_norm_job;

static int infer_add_rmsnorm(cf_node *n, cf_error *err) {
    for (int i = 0; i < 3; i++)
        if (cf_require_dtype(n, i, CF_F32, err)) return -1;
    if (cf_require_same_shape(n, 0, 1, err)) return -1;
    const cf_tensor *x = n->inputs[0], *w = n->inputs[2];
    if (w->ndim != 1 || w->shape[0] != cf_tensor_cols(x))
        return cf_fail(err, "norm weight %s must be [%lld]", w->name, (long long)cf_tensor_cols(x));
    cf_node_output_like(n, 0, x);
    cf_node_output_like(n, 1, x);
    int64_t rows[1] = {cf_tensor_rows(x)};
    cf_node_output(n, 2, CF_F32, 1, rows);
    return 0;
}

static void add_norm_rows(void *arg, long begin, long end) {
    const add_norm_job *j = arg;
    long d = j->dim;
    for (long row = begin; row < end; row++) {
        const float *x = j->x + row * d, *r = j->r + row * d;
        float *h = j->h + row * d, *y = j->y + row * d, ss = 0.0f;
        for (long i = 0; i < d; i++) {
            h[i] = x[i] + r[i];
            ss += h[i] * h[i];
        }
        float rstd = 1.0f / sqrtf(ss / (float)d + j->eps);
        for (long i = 0; i < d; i++) y[i] = h[i] * rstd * j->w[i];
        j->rstd[row] = rstd;
    }
}

static void add_rmsnorm_forward(const cf_node *n) {
    add_norm_job j = {.x = cf_in(n, 0), .r = cf_in(n, 1), .w = cf_in(n, 2), .h = cf_out(n, 0), .y = cf_out(n, 1),
                      .rstd = cf_out(n, 2), .dim = (long)cf_tensor_cols(n->inputs[0]), .eps = (float)n->attrs.f[0]};
    cf_parallel_rows((long)cf_tensor_rows(n->inputs[0]), j.dim * 4, add_norm_rows, &j);
}

static void add_rmsnorm_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *dh = dy[0];
    if (dy[1]) {
        cf_tensor *in[4] = {dy[1], n->outputs[0], n->inputs[2], n->outputs[2]};
        cf_node *b = cf_graph_node_add(g, &cf_op_rmsnorm_backward, in, 4, NULL);
        if (!b) return;
        dh = dh ? cf_nn_add(g, dh, b->outputs[0]) : b->outputs[0];
        dx[2] = b->outputs[1];
    }
    dx[0] = dx[1] = dh;
}

const cf_op_def cf_op_add_rmsnorm = {.name = "add_rmsnorm", .n_outputs = 3, .infer = infer_add_rmsnorm,
                                     .forward = add_rmsnorm_forward, .backward = add_rmsnorm_backward};
