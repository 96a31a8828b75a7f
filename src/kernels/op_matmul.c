/* matmul: C = op(A) op(B) through cf_sgemm (which runs on the pool). A's last dimension
 * is its columns and all others its rows, so a [B, T, in] activation times a [out, in]
 * weight (trans_b) is one GEMM of B*T rows.
 *
 * A and B are both f32, both bf16 (cf_gemm_bf16: vdpbf16ps / AMX where the CPU has them,
 * else widened to f32) or both f16 (widened to f32 in the workspace with F16C, then
 * cf_sgemm: no CPU here multiplies f16 natively, so f16 saves memory, not time); every
 * sum is f32 and so is C, unless attrs.i[2] asks for C in the operands' low precision
 * (rounded from an f32 result in the workspace; not with accumulation). The mixed-
 * precision pass (pass_precision.c) makes the low-precision operands and results.
 *
 * An f32 A also takes a B in bf16, f16, q8_0 or q4_0 (a frozen weight, cf_graph_param_freeze,
 * not transposed as A): cf_gemm_weight decodes B inside the GEMM's packing, in the forward's
 * x W^T as in the backward's dY W, and B gets no gradient. */
#include "cformers/gemm.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

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

/* f32 A times a B stored in another dtype (cf_gemm_weight). */
static bool weight_product(const cf_node *n) {
    cf_dtype b = n->inputs[1]->dtype;
    return n->inputs[0]->dtype == CF_F32 && b != CF_F32 && !n->attrs.i[0];
}

static int infer_matmul(cf_node *n, cf_error *err) {
    const cf_tensor *a = n->inputs[0], *b = n->inputs[1];
    bool weight = weight_product(n) && (b->dtype == CF_BF16 || b->dtype == CF_F16 || cf_dtype_is_blocks(b->dtype));
    if (weight && b->requires_grad)
        return cf_fail(err, "matmul: %s (%s) needs a gradient: only a frozen weight is read in %s by an f32 %s",
                       b->name, cf_dtype_name(b->dtype), cf_dtype_name(b->dtype), a->name);
    if (!weight && ((a->dtype != CF_F32 && a->dtype != CF_BF16 && a->dtype != CF_F16) || b->dtype != a->dtype))
        return cf_fail(err,
                       "matmul: %s (%s) and %s (%s) must be both f32, both bf16 or both f16 (or f32 times an "
                       "untransposed-A frozen bf16, f16, q8_0 or q4_0 weight)",
                       a->name, cf_dtype_name(a->dtype), b->name, cf_dtype_name(b->dtype));
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
    cf_dtype out = (cf_dtype)n->attrs.i[2];
    if (out != CF_F32 && (out != a->dtype || n->accumulate))
        return cf_fail(err, "matmul: a %s result needs %s operands and no accumulation", cf_dtype_name(out),
                       cf_dtype_name(out));
    cf_node_output(n, 0, out, ndim, shape);
    return 0;
}

/* The workspace: the f32 result when the output is bf16 / f16 (attrs.i[2]), then, for f16
 * operands, both widened to f32, A then B. */
static size_t result_elems(const cf_node *n) {
    return n->outputs[0]->dtype == CF_F32 ? 0 : (size_t)cf_tensor_numel(n->outputs[0]);
}

static size_t matmul_workspace(const cf_node *n) {
    size_t elems = result_elems(n);
    if (n->inputs[0]->dtype == CF_F16)
        elems += (size_t)(cf_tensor_numel(n->inputs[0]) + cf_tensor_numel(n->inputs[1]));
    return sizeof(float) * elems;
}

typedef struct widen_job {
    const cf_f16 *src;
    float *dst;
} widen_job;

static void widen_rows(void *arg, long begin, long end) {
    const widen_job *j = arg;
    cf_convert_f16_to_f32(j->src + begin, j->dst + begin, (size_t)(end - begin));
}

static const float *widen(const cf_tensor *t, float *dst) {
    widen_job j = {.src = t->data, .dst = dst};
    cf_parallel_rows((long)cf_tensor_numel(t), 1, widen_rows, &j);
    return dst;
}

static void matmul_forward(const cf_node *n) {
    mm_dims d = dims_of(n);
    const cf_tensor *a = n->inputs[0], *b = n->inputs[1];
    bool ta = n->attrs.i[0], tb = n->attrs.i[1];
    long lda = (long)cf_tensor_cols(a), ldb = (long)cf_tensor_cols(b);
    float beta = n->accumulate & 1u ? 1.0f : 0.0f;
    float *c = result_elems(n) ? n->workspace : cf_out(n, 0);
    if (weight_product(n)) {
        cf_gemm_weight(tb, d.m, d.n, d.k, 1.0f, a->data, lda, b->dtype, b->data, ldb, beta, c, d.n);
        return;
    }
    switch (a->dtype) {
    case CF_BF16: cf_gemm_bf16(ta, tb, d.m, d.n, d.k, 1.0f, a->data, lda, b->data, ldb, beta, c, d.n); break;
    case CF_F16: { /* only here is the workspace sure to exist */
        float *wa = (float *)n->workspace + result_elems(n), *wb = wa + cf_tensor_numel(a);
        cf_sgemm(ta, tb, d.m, d.n, d.k, 1.0f, widen(a, wa), lda, widen(b, wb), ldb, beta, c, d.n);
        break;
    }
    default: cf_sgemm(ta, tb, d.m, d.n, d.k, 1.0f, a->data, lda, b->data, ldb, beta, c, d.n);
    }
    if (c != cf_out(n, 0)) {
        cf_parallel_narrow(c, n->outputs[0]->data, n->outputs[0]->dtype, (long)cf_tensor_numel(n->outputs[0]));
    }
}

/* With C = op(A) op(B): d op(A) = dC op(B)^T and d op(B) = op(A)^T dC, transposed back
 * when the operand was stored transposed. */
static void matmul_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *a = n->inputs[0], *b = n->inputs[1];
    /* Low-precision operands: the incoming gradient is rounded to theirs once, for both
     * products (as autocast does); the gradients come out f32. */
    cf_tensor *dc = cf_nn_cast(g, dy[0], a->dtype);
    bool ta = n->attrs.i[0], tb = n->attrs.i[1];
    if (a->requires_grad)
        dx[0] = ta ? cf_nn_matmul(g, b, dc, tb, true) : cf_nn_matmul(g, dc, b, false, !tb);
    if (b->requires_grad) {
        cf_tensor *a2 = cf_flatten_2d(g, a), *dc2 = cf_flatten_2d(g, dc);
        dx[1] = tb ? cf_nn_matmul(g, dc2, a2, true, ta) : cf_nn_matmul(g, a2, dc2, !ta, false);
    }
}

const cf_op_def cf_op_matmul = {.name = "matmul", .n_outputs = 1, .infer = infer_matmul,
                                .kernels[CF_BACKEND_CPU] = matmul_forward,
                                .backward = matmul_backward, .workspace = matmul_workspace, .accumulate_outputs = 1u};

cf_tensor *cf_nn_matmul(cf_graph *g, cf_tensor *a, cf_tensor *b, bool trans_a, bool trans_b) {
    cf_attrs attrs = {.i = {trans_a, trans_b}};
    return cf_op_apply(g, &cf_op_matmul, (cf_tensor *[]){a, b}, 2, &attrs);
}

cf_tensor *cf_nn_linear(cf_graph *g, cf_tensor *x, cf_tensor *w, cf_tensor *b) {
    cf_tensor *y = cf_nn_matmul(g, x, w, false, true);
    return b ? cf_nn_add_broadcast(g, y, b) : y;
}
