/* linear_combined: y_i = x W_i^T for 2 or 3 weights that read the same input and lie
 * back to back in the parameter block (Q/K/V, gate/up), as ONE product with the stacked
 * weight [sum N_i, K], which is a view of the block: x is packed once and the pool gets
 * one wide product instead of several narrow ones. The result is scattered into the
 * separate outputs; the backward gathers dY the same way for one dx product.
 *
 * inputs (x [..., K], W_1 .. W_n [N_i, K]), n = 2 or 3; outputs y_i [..., N_i]. */
#include <string.h>

#include "cformers/gemm.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct combined {
    int n;
    long rows, k, total, cols[CF_MAX_OUTPUTS], offset[CF_MAX_OUTPUTS];
} combined;

static combined combined_of(const cf_tensor *x, cf_tensor *const *w, int n) {
    combined c = {.n = n, .rows = (long)cf_tensor_rows(x), .k = (long)cf_tensor_cols(x)};
    for (int i = 0; i < n; i++) {
        c.cols[i] = (long)w[i]->shape[0];
        c.offset[i] = c.total;
        c.total += c.cols[i];
    }
    return c;
}

/* Copies between the stacked [rows, total] matrix and the parts (NULL parts: zeros). */
typedef struct stack_job {
    const combined *c;
    float *whole;
    float *parts[CF_MAX_OUTPUTS];
    bool to_parts;
} stack_job;

static void stack_rows(void *arg, long begin, long end) {
    const stack_job *j = arg;
    const combined *c = j->c;
    for (long r = begin; r < end; r++)
        for (int i = 0; i < c->n; i++) {
            float *whole = j->whole + r * c->total + c->offset[i], *part = j->parts[i] ? j->parts[i] + r * c->cols[i] : NULL;
            size_t bytes = sizeof(float) * (size_t)c->cols[i];
            if (j->to_parts)
                memcpy(part, whole, bytes);
            else if (part)
                memcpy(whole, part, bytes);
            else
                memset(whole, 0, bytes);
        }
}

static void restack(const combined *c, float *whole, float *const *parts, bool to_parts) {
    stack_job j = {.c = c, .whole = whole, .to_parts = to_parts};
    for (int i = 0; i < c->n; i++) j.parts[i] = parts[i];
    cf_parallel_rows(c->rows, c->total, stack_rows, &j);
}

static int infer_linear_combined(cf_node *n, cf_error *err) {
    const cf_tensor *x = n->inputs[0];
    for (int i = 0; i < n->n_inputs; i++)
        if (cf_require_dtype(n, i, CF_F32, err)) return -1;
    for (int i = 1; i < n->n_inputs; i++) {
        const cf_tensor *w = n->inputs[i], *prev = n->inputs[i - 1];
        if (w->ndim != 2 || w->shape[1] != cf_tensor_cols(x) || w->role != CF_ROLE_PARAM)
            return cf_fail(err, "weight %s must be a [out, %lld] parameter", w->name, (long long)cf_tensor_cols(x));
        if (i > 1 && w->param_offset != prev->param_offset + cf_tensor_numel(prev))
            return cf_fail(err, "weights %s and %s are not adjacent in the parameter block", prev->name, w->name);
        int64_t shape[CF_MAX_DIMS];
        memcpy(shape, x->shape, sizeof shape);
        shape[x->ndim - 1] = w->shape[0];
        cf_node_output(n, i - 1, CF_F32, x->ndim, shape);
    }
    return 0;
}

static void linear_combined_forward(const cf_node *n) {
    combined c = combined_of(n->inputs[0], n->inputs + 1, n->n_outputs);
    float *parts[CF_MAX_OUTPUTS];
    for (int i = 0; i < c.n; i++) parts[i] = cf_out(n, i);
    cf_sgemm(false, true, c.rows, c.total, c.k, 1.0f, cf_in(n, 0), c.k, cf_in(n, 1), c.k, 0.0f, n->workspace, c.total);
    restack(&c, n->workspace, parts, true);
}

static size_t stacked_bytes(const cf_node *n, int parts) {
    combined c = combined_of(n->inputs[0], n->inputs + 1, parts);
    return sizeof(float) * (size_t)(c.rows * c.total);
}

static size_t linear_combined_workspace(const cf_node *n) { return stacked_bytes(n, n->n_outputs); }

/* ---- backward: inputs (x, W_1 .. W_n, the dy_i present), attrs.i[0] = n,
 * attrs.i[1] = bit mask of the present dy_i; outputs (dx, dW_1 .. dW_n) ---- */

static int infer_linear_combined_backward(cf_node *n, cf_error *err) {
    (void)err;
    int parts = (int)n->attrs.i[0];
    for (int i = 0; i <= parts; i++) cf_node_output_like(n, i, n->inputs[i]);
    return 0;
}

static void linear_combined_backward_forward(const cf_node *n) {
    int parts = (int)n->attrs.i[0];
    combined c = combined_of(n->inputs[0], n->inputs + 1, parts);
    float *dy[CF_MAX_OUTPUTS] = {0}, *dyc = n->workspace;
    for (int i = 0, next = parts + 1; i < parts; i++)
        if (n->attrs.i[1] >> i & 1) dy[i] = (float *)n->inputs[next++]->data;
    restack(&c, dyc, dy, false);
    const float *x = cf_in(n, 0);
    cf_sgemm(false, false, c.rows, c.k, c.total, 1.0f, dyc, c.total, cf_in(n, 1), c.k, 0.0f, cf_out(n, 0), c.k);
    for (int i = 0; i < parts; i++)
        cf_sgemm(true, false, c.cols[i], c.k, c.rows, 1.0f, dyc + c.offset[i], c.total, x, c.k, 0.0f, cf_out(n, i + 1),
                 c.k);
}

static size_t linear_combined_backward_workspace(const cf_node *n) { return stacked_bytes(n, (int)n->attrs.i[0]); }

/* One op definition per part count, as n_outputs is static. */
#define BACKWARD_DEF(parts)                                                                                            \
    {.name = "linear_combined" #parts "_backward", .n_outputs = parts + 1, .infer = infer_linear_combined_backward,   \
     .kernels[CF_BACKEND_CPU] = linear_combined_backward_forward, .workspace = linear_combined_backward_workspace}
static const cf_op_def backward_defs[2] = {BACKWARD_DEF(2), BACKWARD_DEF(3)};

static void linear_combined_backward_rule(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *in[CF_MAX_INPUTS];
    int n_in = 0;
    for (int i = 0; i < n->n_inputs; i++) in[n_in++] = n->inputs[i];
    int64_t mask = 0;
    for (int i = 0; i < n->n_outputs; i++)
        if (dy[i]) {
            in[n_in++] = dy[i];
            mask |= (int64_t)1 << i;
        }
    cf_attrs attrs = {.i = {n->n_outputs, mask}};
    cf_node *b = cf_graph_node_add(g, &backward_defs[n->n_outputs - 2], in, n_in, &attrs);
    if (!b) return;
    for (int i = 0; i < n->n_inputs; i++) dx[i] = b->outputs[i];
}

#define COMBINED_DEF(parts)                                                                                            \
    {.name = "linear_combined" #parts, .n_outputs = parts, .infer = infer_linear_combined,                            \
     .kernels[CF_BACKEND_CPU] = linear_combined_forward, .backward = linear_combined_backward_rule,                    \
     .workspace = linear_combined_workspace}
const cf_op_def cf_op_linear_combined[2] = {COMBINED_DEF(2), COMBINED_DEF(3)};
