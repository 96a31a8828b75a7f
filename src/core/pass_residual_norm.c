/* Fusion pass: a residual add whose sum feeds an RMSNorm becomes one add_rmsnorm node
 * producing both the sum (still read by the next residual add) and the normalised
 * result. LayerNorm (GPT-2) is not fused yet. */
#include "core/graph_rewrite.h"
#include "core/passes.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"

int cf_pass_fuse_residual_norm(cf_graph *g) {
    int fused = 0;
    for (int i = 0; i < g->n_nodes && !g->failed; i++) {
        cf_node *norm = g->nodes[i];
        cf_tensor *h = norm->inputs[0];
        if (norm->op != &cf_op_rmsnorm || !h->producer || h->producer->op != &cf_op_add) continue;
        cf_node *add = h->producer;
        cf_tensor *in[3] = {add->inputs[0], add->inputs[1], norm->inputs[1]}, *y = norm->outputs[0];
        cf_attrs attrs = {.f = {norm->attrs.f[0]}};
        if (cf_graph_retarget_node(g, add, &cf_op_add_rmsnorm, in, 3, &attrs) != 0) break;
        cf_graph_replace_uses(g, y, add->outputs[1]);
        cf_graph_remove_node(g, norm); /* the node after it moves to i */
        i--;
        fused++;
    }
    return fused;
}
