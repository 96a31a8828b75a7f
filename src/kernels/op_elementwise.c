/* Elementwise graph ops: add, mul, scale, broadcast add (bias, positions) and the sum
 * over leading dimensions that is its backward. */
#include <string.h>

#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct binary_job {
    const float *a, *b;
    float *y;
    float s;
    long b_len; /* add_broadcast: b repeats every b_len elements */
} binary_job;

static int infer_same_f32(cf_node *n, cf_error *err) {
    for (int i = 0; i < n->n_inputs; i++)
        if (cf_require_dtype(n, i, CF_F32, err)) return -1;
    if (n->n_inputs == 2 && cf_require_same_shape(n, 0, 1, err)) return -1;
    cf_node_output_like(n, 0, n->inputs[0]);
    return 0;
}

static void add_range(void *arg, long begin, long end) {
    binary_job *j = arg;
    for (long i = begin; i < end; i++) j->y[i] = j->a[i] + j->b[i];
}

static void mul_range(void *arg, long begin, long end) {
    binary_job *j = arg;
    for (long i = begin; i < end; i++) j->y[i] = j->a[i] * j->b[i];
}

static void scale_range(void *arg, long begin, long end) {
    binary_job *j = arg;
    for (long i = begin; i < end; i++) j->y[i] = j->a[i] * j->s;
}

static void add_forward(const cf_node *n) {
    binary_job j = {.a = cf_in(n, 0), .b = cf_in(n, 1), .y = cf_out(n, 0)};
    cf_parallel_rows(cf_tensor_numel(n->inputs[0]), 1, add_range, &j);
}

static void mul_forward(const cf_node *n) {
    binary_job j = {.a = cf_in(n, 0), .b = cf_in(n, 1), .y = cf_out(n, 0)};
    cf_parallel_rows(cf_tensor_numel(n->inputs[0]), 1, mul_range, &j);
}

static void scale_forward(const cf_node *n) {
    binary_job j = {.a = cf_in(n, 0), .y = cf_out(n, 0), .s = (float)n->attrs.f[0]};
    cf_parallel_rows(cf_tensor_numel(n->inputs[0]), 1, scale_range, &j);
}

static void add_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    dx[0] = dx[1] = dy[0];
}

static void mul_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    if (n->inputs[0]->requires_grad) dx[0] = cf_nn_mul(g, dy[0], n->inputs[1]);
    if (n->inputs[1]->requires_grad) dx[1] = cf_nn_mul(g, dy[0], n->inputs[0]);
}

static void scale_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    dx[0] = cf_nn_scale(g, dy[0], (float)n->attrs.f[0]);
}

const cf_op_def cf_op_add = {.name = "add", .n_outputs = 1, .infer = infer_same_f32,
                             .kernels[CF_BACKEND_CPU] = add_forward, .backward = add_backward};
const cf_op_def cf_op_mul = {.name = "mul", .n_outputs = 1, .infer = infer_same_f32,
                             .kernels[CF_BACKEND_CPU] = mul_forward, .backward = mul_backward};
const cf_op_def cf_op_scale = {.name = "scale", .n_outputs = 1, .infer = infer_same_f32,
                               .kernels[CF_BACKEND_CPU] = scale_forward, .backward = scale_backward};

cf_tensor *cf_nn_add(cf_graph *g, cf_tensor *a, cf_tensor *b) { return cf_op_apply(g, &cf_op_add, (cf_tensor *[]){a, b}, 2, NULL); }
cf_tensor *cf_nn_mul(cf_graph *g, cf_tensor *a, cf_tensor *b) { return cf_op_apply(g, &cf_op_mul, (cf_tensor *[]){a, b}, 2, NULL); }

cf_tensor *cf_nn_scale(cf_graph *g, cf_tensor *a, float s) {
    cf_attrs attrs = {.f = {s}};
    return cf_op_apply(g, &cf_op_scale, (cf_tensor *[]){a}, 1, &attrs);
}

/* ---- broadcast add and its reduction ---- */

static int infer_add_broadcast(cf_node *n, cf_error *err) {
    if (cf_require_dtype(n, 0, CF_F32, err) || cf_require_dtype(n, 1, CF_F32, err)) return -1;
    const cf_tensor *x = n->inputs[0], *b = n->inputs[1];
    int lead = x->ndim - b->ndim;
    if (lead < 0 || memcmp(x->shape + lead, b->shape, sizeof(int64_t) * (size_t)b->ndim) != 0)
        return cf_fail(err, "%s is not shaped like the trailing dimensions of %s", b->name, x->name);
    cf_node_output_like(n, 0, x);
    return 0;
}

static void add_broadcast_rows(void *arg, long begin, long end) {
    binary_job *j = arg;
    for (long r = begin; r < end; r++) {
        const float *a = j->a + r * j->b_len;
        float *y = j->y + r * j->b_len;
        for (long i = 0; i < j->b_len; i++) y[i] = a[i] + j->b[i];
    }
}

static void add_broadcast_forward(const cf_node *n) {
    long b_len = (long)cf_tensor_numel(n->inputs[1]);
    binary_job j = {.a = cf_in(n, 0), .b = cf_in(n, 1), .y = cf_out(n, 0), .b_len = b_len};
    cf_parallel_rows((long)cf_tensor_numel(n->inputs[0]) / b_len, b_len, add_broadcast_rows, &j);
}

static void add_broadcast_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    dx[0] = dy[0];
    if (n->inputs[1]->requires_grad) dx[1] = cf_nn_sum_leading(g, dy[0], n->inputs[1]->ndim);
}

const cf_op_def cf_op_add_broadcast = {.name = "add_broadcast", .n_outputs = 1, .infer = infer_add_broadcast,
                                       .kernels[CF_BACKEND_CPU] = add_broadcast_forward,
                                       .backward = add_broadcast_backward};

cf_tensor *cf_nn_add_broadcast(cf_graph *g, cf_tensor *x, cf_tensor *b) {
    return cf_op_apply(g, &cf_op_add_broadcast, (cf_tensor *[]){x, b}, 2, NULL);
}

static int infer_sum_leading(cf_node *n, cf_error *err) {
    if (cf_require_dtype(n, 0, CF_F32, err)) return -1;
    const cf_tensor *x = n->inputs[0];
    int keep = (int)n->attrs.i[0];
    if (keep < 0 || keep > x->ndim) return cf_fail(err, "cannot keep %d of %d dimensions", keep, x->ndim);
    cf_node_output(n, 0, CF_F32, keep, x->shape + (x->ndim - keep));
    return 0;
}

typedef struct sum_job {
    const float *x;
    float *y;
    long rows, cols;
    bool accumulate; /* add into y instead of overwriting it */
} sum_job;

/* Each range of columns is summed over all rows in row order: deterministic. */
static void sum_columns(void *arg, long begin, long end) {
    sum_job *j = arg;
    if (!j->accumulate) memset(j->y + begin, 0, sizeof(float) * (size_t)(end - begin));
    for (long r = 0; r < j->rows; r++) {
        const float *x = j->x + r * j->cols;
        for (long c = begin; c < end; c++) j->y[c] += x[c];
    }
}

static void sum_leading_forward(const cf_node *n) {
    long cols = (long)cf_tensor_numel(n->outputs[0]);
    sum_job j = {.x = cf_in(n, 0), .y = cf_out(n, 0), .rows = (long)cf_tensor_numel(n->inputs[0]) / cols, .cols = cols,
                 .accumulate = n->accumulate & 1u};
    cf_parallel_rows(cols, j.rows, sum_columns, &j);
}

/* Only appears in backward passes, so it needs no backward of its own. */
const cf_op_def cf_op_sum_leading = {.name = "sum_leading", .n_outputs = 1, .infer = infer_sum_leading,
                                     .kernels[CF_BACKEND_CPU] = sum_leading_forward, .accumulate_outputs = 1u};

cf_tensor *cf_nn_sum_leading(cf_graph *g, cf_tensor *x, int ndim) {
    cf_attrs attrs = {.i = {ndim}};
    return cf_op_apply(g, &cf_op_sum_leading, (cf_tensor *[]){x}, 1, &attrs);
}
