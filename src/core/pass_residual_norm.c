/* Fusion pass: a residual add whose sum feeds an RMSNorm (LLaMA) or a LayerNorm (GPT-2)
 * becomes one add_rmsnorm / add_layernorm node producing both the sum (still read by
 * the next residual add) and the normalised result. */
#include "core/graph_rewrite.h"
#include "core/passes.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"

static const cf_op_def *fused_op(const cf_op_def *norm) {
    return norm == &cf_op_rmsnorm ? &cf_op_add_rmsnorm : norm == &cf_op_layernorm ? &cf_op_add_layernorm : NULL;
}

/* Whether the norm's weight or bias (at node `at`) is computed by a node between `add` and
 * it (Gemma's 1 + w): the fused node takes the add's place and could not read it. */
static bool made_after(const cf_graph *g, int at, const cf_node *add, const cf_node *norm) {
    for (int j = at - 1; j >= 0 && g->nodes[j] != add; j--)
        for (int k = 1; k < norm->n_inputs; k++)
            if (norm->inputs[k] && norm->inputs[k]->producer == g->nodes[j]) return true;
    return false;
}

int cf_pass_fuse_residual_norm(cf_graph *g) {
    int fused = 0;
    for (int i = 0; i < g->n_nodes && !g->failed; i++) {
        cf_node *norm = g->nodes[i];
        cf_tensor *h = norm->inputs[0];
        const cf_op_def *op = fused_op(norm->op);
        if (!op || !h->producer || h->producer->op != &cf_op_add) continue;
        cf_node *add = h->producer;
        if (made_after(g, i, add, norm)) continue;
        /* x, r, then the norm's weight (and bias) */
        cf_tensor *in[4] = {add->inputs[0], add->inputs[1], norm->inputs[1], norm->inputs[2]}, *y = norm->outputs[0];
        cf_attrs attrs = {.f = {norm->attrs.f[0]}};
        if (cf_graph_retarget_node(g, add, op, in, norm->n_inputs + 1, &attrs) != 0) break;
        cf_graph_replace_uses(g, y, add->outputs[1]);
        cf_graph_remove_node(g, norm); /* the node after it moves to i */
        i--;
        fused++;
    }
    return fused;
}
