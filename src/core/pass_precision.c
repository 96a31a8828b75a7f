/* The automatic mixed-precision pass (model_config.compute_dtype; docs/precision.md).
 *
 * Given the low-precision type, it rewrites the forward graph before autodiff so that
 *   - every matmul reads both operands in that type: activations through a cast placed
 *     right before their first product (one cast per tensor, shared by the products that
 *     read it, so a norm's output feeding Q, K and V is rounded once), weights through a
 *     cast at the start of the step into a copy kept outside the activation arena (the
 *     low-precision weights, rewritten from the f32 master weights by the first forward
 *     of each step: the trainer skips them in the other micro-batches);
 *   - with bf16, flash attention reads q, k, v in bf16 (there is no f16 attention kernel,
 *     so under f16 attention stays f32) and, when its only reader is a product (through
 *     the heads' merge), writes its output in bf16 rather than f32 plus a bf16 cast: the
 *     tensor its backward keeps takes half the bytes, as under autocast; and the fused
 *     output layer + loss takes its input
 *     and weights in bf16 for its three products (its logits, softmax, loss and gradients
 *     stay f32; under f16 it stays f32: its unscaled logit gradients would underflow);
 *   - SwiGLU's gate and up are written by their products in the low type (SwiGLU computes
 *     in f32 from them and writes f32), as they are what its backward keeps.
 * Everything else stays f32: embeddings and their gradient accumulation, norms, RoPE,
 * softmax, the loss, the residual stream, the other activations between products and the
 * optimizer. Products write f32, so weight gradients reach the f32 gradient block directly; the casts' backward is the identity, and a
 * matmul's backward rounds its incoming gradient to the operands' type (op_matmul.c).
 * The memory planner sizes the low-precision activations at their real size: the ones
 * saved for backward (product inputs, q/k/v) take half the bytes. */
#include <stdlib.h>

#include "core/graph_rewrite.h"
#include "core/passes.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"

typedef struct precision {
    cf_graph *g;
    cf_dtype to;
    cf_tensor **low; /* per tensor id of the original graph: its cast, once made */
    int n_known;
} precision;

/* Flash attention's output t (or its merge of heads), read only by `reader`, a product:
 * attention writes it in bf16 instead (a reshape is a view: it follows). Whether it did. */
static bool narrow_attention(precision *p, cf_tensor *t) {
    cf_tensor *out = t->producer && t->producer->op == &cf_op_reshape ? t->producer->inputs[0] : t;
    cf_node *fa = out->producer;
    if (p->to != CF_BF16 || !fa || fa->op != &cf_op_flash_attention || fa->outputs[0] != out ||
        fa->inputs[0]->dtype != CF_BF16 || out->keep || t->keep || cf_graph_readers(p->g, t) != 1 ||
        (out != t && cf_graph_readers(p->g, out) != 1))
        return false;
    fa->attrs.i[1] = 1;
    out->dtype = t->dtype = CF_BF16;
    return true;
}

/* t in the low type: a parameter's copy made at the start of the step (kept, so it lives
 * outside the arena), attention's output written in it (narrow_attention), an
 * activation's cast placed right before `reader`. */
static cf_tensor *low_of(precision *p, cf_tensor *t, cf_node *reader) {
    if (t->dtype != CF_F32) return t;
    if (t->id < p->n_known && p->low[t->id]) return p->low[t->id];
    if (t->role != CF_ROLE_PARAM && narrow_attention(p, t)) return t;
    cf_tensor *c = cf_nn_cast(p->g, t, p->to);
    if (!c) return NULL;
    bool weight = t->role == CF_ROLE_PARAM;
    cf_tensor_set_name(c, "%s.%s", t->name, cf_dtype_name(p->to));
    cf_graph_move_node(p->g, c->producer, weight ? 0 : reader->index);
    if (weight) {
        cf_graph_keep(p->g, c);
        c->producer->weights_copy = true; /* once per step, not per micro-batch */
    }
    if (t->id < p->n_known) p->low[t->id] = c;
    return c;
}

/* SwiGLU's gate and up, when each is a low-precision product read by nothing else: the
 * products write them in the low type, which is what SwiGLU's backward keeps. */
static void narrow_swiglu(cf_graph *g, cf_node *n, cf_dtype to) {
    for (int k = 0; k < 2; k++) {
        cf_tensor *t = n->inputs[k];
        cf_node *p = t->producer;
        if (!p || p->op != &cf_op_matmul || t->dtype != CF_F32 || p->inputs[0]->dtype != to || t->keep ||
            cf_graph_readers(g, t) != 1)
            return;
    }
    for (int k = 0; k < 2; k++) {
        n->inputs[k]->producer->attrs.i[2] = to;
        n->inputs[k]->dtype = to;
    }
}

int cf_pass_precision(cf_graph *g, cf_dtype compute) {
    if (compute == CF_F32 || g->failed) return 0;
    precision p = {.g = g, .to = compute, .low = cf_xcalloc((size_t)g->n_tensors, sizeof(cf_tensor *)),
                   .n_known = g->n_tensors};
    int n_nodes = g->n_nodes, changed = 0;
    cf_node **nodes = cf_xmalloc(sizeof *nodes * (size_t)(n_nodes ? n_nodes : 1));
    for (int i = 0; i < n_nodes; i++) nodes[i] = g->nodes[i];
    for (int i = 0; i < n_nodes && !g->failed; i++) {
        cf_node *n = nodes[i];
        if (n->op == &cf_op_swiglu) narrow_swiglu(g, n, compute); /* its producers come first: converted */
        int operands = 0;
        if (n->op == &cf_op_matmul)
            operands = 2;
        else if (n->op == &cf_op_flash_attention && compute == CF_BF16)
            operands = 3;
        else if (n->op == &cf_op_linear_cross_entropy && compute == CF_BF16)
            operands = 2;
        bool all_f32 = operands > 0;
        for (int k = 0; k < operands; k++) all_f32 &= n->inputs[k]->dtype == CF_F32;
        if (!all_f32) continue;
        for (int k = 0; k < operands && !g->failed; k++) {
            cf_tensor *c = low_of(&p, n->inputs[k], n);
            if (c) n->inputs[k] = c;
        }
        changed++;
    }
    free(nodes);
    free(p.low);
    return g->failed ? -1 : changed;
}
