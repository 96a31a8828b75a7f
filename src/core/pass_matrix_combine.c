/* Fusion pass: projections x W_i^T that read the same x, with weights adjacent in the
 * parameter block (LLaMA's Q/K/V and gate/up, created in that order), become one
 * linear_combined node, a single product over the stacked weights. */
#include "core/graph_rewrite.h"
#include "core/passes.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"

enum { MAX_PARTS = 3 };

/* The weight of a projection x W^T by a parameter, or NULL for any other node. */
static cf_tensor *weight_of(const cf_node *n) {
    if (n->op != &cf_op_matmul || n->attrs.i[0] || !n->attrs.i[1]) return NULL;
    cf_tensor *w = n->inputs[1];
    return w->role == CF_ROLE_PARAM && !w->view_of ? w : NULL;
}

/* A later projection of the same input by the parameter right after n's in the block. */
static cf_node *next_member(const cf_graph *g, const cf_node *n) {
    const cf_tensor *w = weight_of(n);
    int64_t next = w->param_offset + cf_tensor_numel(w);
    for (int i = n->index + 1; i < g->n_nodes; i++) {
        cf_node *m = g->nodes[i];
        const cf_tensor *wm = weight_of(m);
        if (wm && m->inputs[0] == n->inputs[0] && wm->param_offset == next) return m;
    }
    return NULL;
}

static int combine(cf_graph *g, cf_node *const *members, int parts) {
    cf_node *first = members[0];
    cf_tensor *in[MAX_PARTS + 1] = {first->inputs[0]}, *old[MAX_PARTS];
    for (int k = 0; k < parts; k++) {
        in[k + 1] = members[k]->inputs[1];
        old[k] = members[k]->outputs[0];
    }
    if (cf_graph_retarget_node(g, first, &cf_op_linear_combined[parts - 2], in, parts + 1, NULL) != 0) return -1;
    for (int k = 1; k < parts; k++) {
        cf_graph_replace_uses(g, old[k], first->outputs[k]);
        cf_graph_remove_node(g, members[k]);
    }
    return 0;
}

int cf_pass_matrix_combine(cf_graph *g, int64_t threshold) {
    int fused = 0;
    for (int i = 0; i < g->n_nodes && !g->failed; i++) {
        cf_node *members[MAX_PARTS] = {g->nodes[i]};
        if (!weight_of(members[0])) continue;
        int parts = 1;
        while (parts < MAX_PARTS && (members[parts] = next_member(g, members[parts - 1]))) parts++;
        int64_t stacked = 0;
        for (int k = 0; k < parts; k++) stacked += cf_tensor_numel(members[k]->inputs[1]);
        if (parts < 2 || stacked < threshold) continue;
        if (combine(g, members, parts) != 0) break;
        fused++;
    }
    return fused;
}
