/* Shared plumbing of the built-in graph ops. */
#include "kernels/graph_ops.h"

#include <string.h>

#include "kernels/kernels.h"

cf_tensor *cf_op_apply(cf_graph *g, const cf_op_def *op, cf_tensor *const *inputs, int n_inputs, const cf_attrs *attrs) {
    cf_node *n = cf_graph_node_add(g, op, inputs, n_inputs, attrs);
    return n ? n->outputs[0] : NULL;
}

int cf_require_dtype(const cf_node *n, int i, cf_dtype dtype, cf_error *err) {
    const cf_tensor *t = n->inputs[i];
    if (t->dtype == dtype) return 0;
    return cf_fail(err, "input %d (%s) is %s, expected %s", i, t->name, cf_dtype_name(t->dtype), cf_dtype_name(dtype));
}

int cf_require_same_shape(const cf_node *n, int i, int j, cf_error *err) {
    const cf_tensor *a = n->inputs[i], *b = n->inputs[j];
    if (cf_tensor_same_shape(a, b)) return 0;
    char sa[96], sb[96];
    return cf_fail(err, "shapes differ: %s %s vs %s %s", a->name, cf_tensor_shape_str(a, sa, sizeof sa), b->name,
                   cf_tensor_shape_str(b, sb, sizeof sb));
}

cf_tensor *cf_flatten_2d(cf_graph *g, cf_tensor *t) {
    if (!t || t->ndim == 2) return t;
    int64_t shape[2] = {cf_tensor_rows(t), cf_tensor_cols(t)};
    return cf_nn_reshape(g, t, 2, shape);
}

typedef struct copy_job {
    float *dst;
    const float *src;
} copy_job;

static void copy_rows(void *arg, long begin, long end) {
    copy_job *j = arg;
    memcpy(j->dst + begin, j->src + begin, sizeof(float) * (size_t)(end - begin));
}

void cf_ops_copy(float *dst, const float *src, long n) {
    copy_job job = {dst, src};
    cf_parallel_rows(n, 1, copy_rows, &job);
}
