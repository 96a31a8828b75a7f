/* matmul: C = op(A) op(B) on f32 matrices through cf_sgemm (which runs on the pool).
 * A's last dimension is its columns and all others its rows, so a [B, T, in]
 * activation times a [out, in] weight (trans_b) is one GEMM of B*T rows. */
#include "cformers/gemm.h"
#include "kernels/graph_ops.h"

typedef struct mm_dims {
    long m, n, k;
} mm_dims;

static mm_dims dims_of(const cf_node *n) {
    const cf_tensor *a = n->inputs[0], *b = n->inputs[1];
    bool ta = n->attrs.i[0], tb = n->attrs.i[1];
    long ra = (long)cf_tensor_rows(a), ca = (long)cf_tensor_cols(a);
    long rb = (long)cf_tensor_rows(b), cb = (long)cf_tensor_cols(b);
    return (mm_dims){.m = ta ? ca : ra, .k = ta ? ra : ca, .n = tb ? rb : cb};
}

static int infer_matmul(cf_node *n, cf_error *err) {
    if (cf_require_dtype(n, 0, CF_F32, err) || cf_require_dtype(n, 1, CF_F32, err)) return -1;
    const cf_tensor *a = n->inputs[0], *b = n->inputs[1];
    bool ta = n->attrs.i[0], tb = n->attrs.i[1];
    if (b->ndim != 2 || (ta && a->ndim != 2) || a->ndim < 1)
        return cf_fail(err, "%s (%dD) and %s (%dD): the second operand, and a transposed first one, must be 2-D",
                       a->name, a->ndim, b->name, b->ndim);
    mm_dims d = dims_of(n);
    long kb = tb ? (long)b->shape[1] : (long)b->shape[0];
    if (d.k != kb)
        return cf_fail(err, "%s%s has %ld columns but %s%s has %ld rows", a->name, ta ? "^T" : "", d.k, b->name,
                       tb ? "^T" : "", kb);
    int64_t shape[CF_MAX_DIMS];
    int ndim = ta ? 2 : a->ndim;
    for (int i = 0; i < ndim - 1; i++) shape[i] = ta ? d.m : a->shape[i];
    shape[ndim - 1] = d.n;
    cf_node_output(n, 0, CF_F32, ndim, shape);
    return 0;
}

static void matmul_forward(const cf_node *n) {
    mm_dims d = dims_of(n);
    cf_sgemm(n->attrs.i[0], n->attrs.i[1], d.m, d.n, d.k, 1.0f, cf_in(n, 0), (long)cf_tensor_cols(n->inputs[0]),
             cf_in(n, 1), (long)cf_tensor_cols(n->inputs[1]), n->accumulate & 1u ? 1.0f : 0.0f, cf_out(n, 0), d.n);
}

/* With C = op(A) op(B): d op(A) = dC op(B)^T and d op(B) = op(A)^T dC, transposed back
 * when the operand was stored transposed. */
static void matmul_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *a = n->inputs[0], *b = n->inputs[1], *dc = dy[0];
    bool ta = n->attrs.i[0], tb = n->attrs.i[1];
    if (a->requires_grad)
        dx[0] = ta ? cf_nn_matmul(g, b, dc, tb, true) : cf_nn_matmul(g, dc, b, false, !tb);
    if (b->requires_grad) {
        cf_tensor *a2 = cf_flatten_2d(g, a), *dc2 = cf_flatten_2d(g, dc);
        dx[1] = tb ? cf_nn_matmul(g, dc2, a2, true, ta) : cf_nn_matmul(g, a2, dc2, !ta, false);
    }
}

const cf_op_def cf_op_matmul = {.name = "matmul", .n_outputs = 1, .infer = infer_matmul, .forward = matmul_forward,
                                .backward = matmul_backward, .accumulate_outputs = 1u};

cf_tensor *cf_nn_matmul(cf_graph *g, cf_tensor *a, cf_tensor *b, bool trans_a, bool trans_b) {
    cf_attrs attrs = {.i = {trans_a, trans_b}};
    return cf_op_apply(g, &cf_op_matmul, (cf_tensor *[]){a, b}, 2, &attrs);
}

cf_tensor *cf_nn_linear(cf_graph *g, cf_tensor *x, cf_tensor *w, cf_tensor *b) {
    cf_tensor *y = cf_nn_matmul(g, x, w, false, true);
    return b ? cf_nn_add_broadcast(g, y, b) : y;
}
