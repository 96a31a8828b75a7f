/* The flash_attention op and its backward (kernels in flash_attention.c).
 * Inputs q, k, v: all f32 or all bf16. Outputs: out [B, T, H, hd] and lse [B, H, T],
 * the log-sum-exp the backward needs, both f32 whatever the inputs, except that with
 * bf16 inputs attrs.i[1] = 1 asks for out in bf16 (the mixed-precision pass sets it when
 * out's only reader is a product, which reads it in bf16 anyway: half the bytes kept for
 * the backward, which reads it too); the gradients of q, k, v have the inputs' dtype. */
#include "cformers/fused.h"
#include "cformers/threads.h"
#include "kernels/flash_attention.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"

static cf_fa_shape shape_of(const cf_node *n, const cf_tensor *q, const cf_tensor *k, const cf_tensor *out) {
    return (cf_fa_shape){.batch = (long)q->shape[0], .seq = (long)q->shape[1], .heads = (long)q->shape[2],
                         .kv_heads = (long)k->shape[2], .head_dim = (long)q->shape[3], .dtype = q->dtype,
                         .out = out->dtype, .mask = cf_attrs_mask(&n->attrs)};
}

/* attrs.i[0] = scratch slots: the pool size when the graph was built (any thread count
 * runs correctly with them). */
static void set_slots(cf_node *n) { n->attrs.i[0] = cf_num_threads(); }
static int slots_of(const cf_node *n) { return (int)n->attrs.i[0]; }

/* The unfused op's shapes, for f32 or bf16 inputs, with lse [B, H, T] as the saved output. */
static int infer_flash_attention(cf_node *n, cf_error *err) {
    const cf_tensor *q = n->inputs[0], *k = n->inputs[1], *v = n->inputs[2];
    cf_attn_mask mask = cf_attrs_mask(&n->attrs);
    if (cf_attn_mask_check(&mask, n->op->name, err)) return -1;
    if ((q->dtype != CF_F32 && q->dtype != CF_BF16) || k->dtype != q->dtype || v->dtype != q->dtype)
        return cf_fail(err, "flash_attention: q, k, v must be all f32 or all bf16 (%s %s, %s %s, %s %s)", q->name,
                       cf_dtype_name(q->dtype), k->name, cf_dtype_name(k->dtype), v->name, cf_dtype_name(v->dtype));
    if (q->ndim != 4 || k->ndim != 4 || cf_require_same_shape(n, 1, 2, err) != 0 || k->shape[0] != q->shape[0] ||
        k->shape[1] != q->shape[1] || k->shape[3] != q->shape[3] || q->shape[2] % k->shape[2] != 0)
        return cf_fail(err, "need q [B, T, H, hd] and k, v [B, T, KV, hd] with H a multiple of KV (%s, %s, %s)",
                       q->name, k->name, v->name);
    if (n->attrs.i[1] && q->dtype != CF_BF16)
        return cf_fail(err, "flash_attention: a bf16 output needs bf16 q, k, v (%s is %s)", q->name, cf_dtype_name(q->dtype));
    cf_node_output(n, 0, n->attrs.i[1] ? CF_BF16 : CF_F32, 4, q->shape);
    int64_t lse[3] = {q->shape[0], q->shape[2], q->shape[1]};
    cf_node_output(n, 1, CF_F32, 3, lse);
    set_slots(n);
    return 0;
}

static void flash_attention_forward(const cf_node *n) {
    cf_fa_shape s = shape_of(n, n->inputs[0], n->inputs[1], n->outputs[0]);
    cf_flash_attention_forward(&s, n->inputs[0]->data, n->inputs[1]->data, n->inputs[2]->data, n->outputs[0]->data,
                               cf_out(n, 1), n->workspace, slots_of(n));
}

static size_t flash_attention_workspace(const cf_node *n) {
    cf_fa_shape s = shape_of(n, n->inputs[0], n->inputs[1], n->outputs[0]);
    return cf_flash_attention_forward_workspace(&s, slots_of(n));
}

static void flash_attention_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    /* dout is f32 (a bf16 output's gradient may come back bf16 through a cast) */
    cf_tensor *in[6] = {cf_nn_cast(g, dy[0], CF_F32), n->inputs[0], n->inputs[1], n->inputs[2], n->outputs[0],
                        n->outputs[1]};
    cf_attrs a = {0}; /* the forward's mask */
    cf_attn_mask mask = cf_attrs_mask(&n->attrs);
    cf_attrs_set_mask(&a, &mask);
    cf_node *b = cf_graph_node_add(g, &cf_op_flash_attention_backward, in, 6, &a);
    if (!b) return;
    for (int i = 0; i < 3; i++) dx[i] = b->outputs[i];
}

const cf_op_def cf_op_flash_attention = {.name = "flash_attention", .n_outputs = 2, .infer = infer_flash_attention,
                                         .kernels[CF_BACKEND_CPU] = flash_attention_forward,
                                         .backward = flash_attention_backward, .workspace = flash_attention_workspace};

cf_tensor *cf_nn_flash_attention_masked(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v,
                                        const cf_attn_mask *mask) {
    cf_attrs a = {0};
    cf_attrs_set_mask(&a, mask);
    return cf_op_apply(g, &cf_op_flash_attention, (cf_tensor *[]){q, k, v}, 3, &a);
}

cf_tensor *cf_nn_flash_attention(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v) {
    cf_attn_mask causal = cf_mask_causal();
    return cf_nn_flash_attention_masked(g, q, k, v, &causal);
}

/* ---- backward: inputs (dout, q, k, v, out, lse), outputs (dq, dk, dv) ---- */

static int infer_flash_attention_backward(cf_node *n, cf_error *err) {
    (void)err;
    for (int i = 0; i < 3; i++) cf_node_output_like(n, i, n->inputs[i + 1]);
    set_slots(n);
    return 0;
}

static void flash_attention_backward_forward(const cf_node *n) {
    cf_fa_shape s = shape_of(n, n->inputs[1], n->inputs[2], n->inputs[4]);
    cf_flash_attention_backward(&s, n->inputs[1]->data, n->inputs[2]->data, n->inputs[3]->data, n->inputs[4]->data,
                                cf_in(n, 5), cf_in(n, 0), n->outputs[0]->data, n->outputs[1]->data,
                                n->outputs[2]->data, n->workspace, slots_of(n));
}

static size_t flash_attention_backward_workspace(const cf_node *n) {
    cf_fa_shape s = shape_of(n, n->inputs[1], n->inputs[2], n->inputs[4]);
    return cf_flash_attention_backward_workspace(&s, slots_of(n));
}

const cf_op_def cf_op_flash_attention_backward = {.name = "flash_attention_backward", .n_outputs = 3,
                                                  .infer = infer_flash_attention_backward,
                                                  .kernels[CF_BACKEND_CPU] = flash_attention_backward_forward,
                                                  .workspace = flash_attention_backward_workspace};
