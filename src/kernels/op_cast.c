/* cast: x converted to another element type, f32 <-> bf16 or f16 (rounding to nearest
 * even; f16 overflows to inf beyond 65504, which loss scaling detects).
 * Its gradient is the incoming gradient cast back to x's type: rounding is treated as
 * the identity, as mixed-precision training does. */
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

static bool low(cf_dtype t) { return t == CF_BF16 || t == CF_F16; }

static int infer_cast(cf_node *n, cf_error *err) {
    const cf_tensor *x = n->inputs[0];
    cf_dtype to = (cf_dtype)n->attrs.i[0];
    if (!((x->dtype == CF_F32 && low(to)) || (low(x->dtype) && to == CF_F32)))
        return cf_fail(err, "cast: %s is %s, to %s; only f32 <-> bf16 and f32 <-> f16 casts exist", x->name,
                       cf_dtype_name(x->dtype), cf_dtype_name(to));
    cf_node_output(n, 0, to, x->ndim, x->shape);
    return 0;
}

static void cast_rows(void *arg, long begin, long end) {
    const cf_node *n = arg;
    const void *src = n->inputs[0]->data;
    void *dst = n->outputs[0]->data;
    size_t count = (size_t)(end - begin);
    switch (n->outputs[0]->dtype) {
    case CF_BF16: cf_convert_f32_to_bf16((const float *)src + begin, (cf_bf16 *)dst + begin, count); break;
    case CF_F16: cf_convert_f32_to_f16((const float *)src + begin, (cf_f16 *)dst + begin, count); break;
    default:
        if (n->inputs[0]->dtype == CF_BF16)
            cf_convert_bf16_to_f32((const cf_bf16 *)src + begin, (float *)dst + begin, count);
        else
            cf_convert_f16_to_f32((const cf_f16 *)src + begin, (float *)dst + begin, count);
    }
}

static void cast_forward(const cf_node *n) {
    cf_parallel_rows((long)cf_tensor_numel(n->inputs[0]), 1, cast_rows, (void *)n);
}

static void cast_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    dx[0] = cf_nn_cast(g, dy[0], n->inputs[0]->dtype);
}

const cf_op_def cf_op_cast = {.name = "cast", .n_outputs = 1, .infer = infer_cast,
                              .kernels[CF_BACKEND_CPU] = cast_forward, .backward = cast_backward};

cf_tensor *cf_nn_cast(cf_graph *g, cf_tensor *x, cf_dtype dtype) {
    if (x && x->dtype == dtype) return x;
    cf_attrs attrs = {.i = {dtype}};
    return cf_op_apply(g, &cf_op_cast, (cf_tensor *[]){x}, 1, &attrs);
}
