/* Fusion pass: the output projection feeding the cross-entropy becomes one
 * linear_cross_entropy node, so the training step never stores the logits. */
#include "core/graph_rewrite.h"
#include "core/passes.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"

/* x W^T with W in x's dtype (a frozen q8_0 / q4_0 / bf16 head under f32 x stays a matmul). */
static bool is_projection(const cf_node *n) {
    return n && n->op == &cf_op_matmul && !n->attrs.i[0] && n->attrs.i[1] && n->inputs[1]->dtype == n->inputs[0]->dtype;
}

int cf_pass_fuse_cross_entropy(cf_graph *g) {
    int fused = 0;
    for (int i = 0; i < g->n_nodes && !g->failed; i++) {
        cf_node *n = g->nodes[i];
        cf_tensor *logits = n->inputs[0];
        if (n->op != &cf_op_cross_entropy || !is_projection(logits->producer) || logits->keep ||
            cf_graph_readers(g, logits) != 1)
            continue;
        cf_node *projection = logits->producer;
        cf_tensor *in[3] = {projection->inputs[0], projection->inputs[1], n->inputs[1]};
        if (cf_graph_retarget_node(g, n, &cf_op_linear_cross_entropy, in, 3, NULL) != 0) break;
        cf_graph_remove_node(g, projection); /* it came before n, which moves to i - 1 */
        i--;
        fused++;
    }
    return fused;
}
