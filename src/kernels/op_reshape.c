/* reshape: a view sharing its input's storage; the planner binds it, nothing runs. */
#include "kernels/graph_ops.h"

static int infer_reshape(cf_node *n, cf_error *err) {
    cf_tensor *x = n->inputs[0], *y = n->outputs[0];
    const int64_t *shape = n->attrs.p;
    int ndim = (int)n->attrs.i[0];
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) numel *= shape[i];
    if (ndim > CF_MAX_DIMS || numel != cf_tensor_numel(x)) {
        char s[96];
        return cf_fail(err, "cannot view %s %s as %d dimensions of %lld elements", x->name,
                       cf_tensor_shape_str(x, s, sizeof s), ndim, (long long)numel);
    }
    cf_node_output(n, 0, x->dtype, ndim, shape);
    y->view_of = x->view_of ? x->view_of : x;
    y->view_offset = x->view_offset;
    n->attrs.p = NULL; /* pointed at the caller's shape array */
    return 0;
}

static void reshape_forward(const cf_node *n) { (void)n; }

static void reshape_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    dx[0] = cf_nn_reshape(g, dy[0], n->inputs[0]->ndim, n->inputs[0]->shape);
}

const cf_op_def cf_op_reshape = {.name = "reshape", .n_outputs = 1, .infer = infer_reshape,
                                 .kernels[CF_BACKEND_CPU] = reshape_forward, .backward = reshape_backward};

cf_tensor *cf_nn_reshape(cf_graph *g, cf_tensor *x, int ndim, const int64_t *shape) {
    if (x && ndim == x->ndim) {
        bool same = true;
        for (int i = 0; i < ndim; i++) same &= shape[i] == x->shape[i];
        if (same) return x;
    }
    /* attrs.p is only read by infer, which clears it. */
    cf_attrs attrs = {.i = {ndim}, .p = shape};
    return cf_op_apply(g, &cf_op_reshape, (cf_tensor *[]){x}, 1, &attrs);
}
