/* Graph rewriting for the fusion passes: change a node in place, drop a node. Passes
 * run before autodiff, so the fused ops' own backward rules make the gradients. */
#include "core/graph_rewrite.h"

#include <stdio.h>
#include <stdlib.h>

int cf_graph_readers(const cf_graph *g, const cf_tensor *t) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i]->n_inputs; k++) n += g->nodes[i]->inputs[k] == t;
    return n;
}

void cf_graph_replace_uses(cf_graph *g, cf_tensor *old, cf_tensor *replacement) {
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i]->n_inputs; k++)
            if (g->nodes[i]->inputs[k] == old) g->nodes[i]->inputs[k] = replacement;
    for (int i = 0; i < g->n_tensors; i++) /* views (reshapes) share their base's storage */
        if (g->tensors[i]->view_of == old) g->tensors[i]->view_of = replacement;
    snprintf(replacement->name, sizeof replacement->name, "%s", old->name);
    replacement->keep |= old->keep;
}

/* Drops the tensors for which `drop` is set from the tensor list and renumbers. */
static void compact_tensors(cf_graph *g, const bool *drop) {
    int kept = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        if (drop[i]) {
            free(g->tensors[i]);
            continue;
        }
        g->tensors[kept] = g->tensors[i];
        g->tensors[kept]->id = kept;
        kept++;
    }
    g->n_tensors = kept;
}

static void drop_outputs(cf_graph *g, cf_node *n, int from) {
    bool *drop = cf_xcalloc((size_t)g->n_tensors, sizeof *drop);
    for (int k = from; k < n->n_outputs; k++) drop[n->outputs[k]->id] = true;
    n->n_outputs = from;
    compact_tensors(g, drop);
    free(drop);
}

int cf_graph_retarget_node(cf_graph *g, cf_node *n, const cf_op_def *op, cf_tensor *const *inputs, int n_inputs,
                           const cf_attrs *attrs) {
    bool needs_grad = false;
    for (int i = 0; i < n_inputs; i++) {
        n->inputs[i] = inputs[i];
        needs_grad |= inputs[i]->requires_grad;
    }
    n->n_inputs = n_inputs;
    n->op = op;
    n->attrs = attrs ? *attrs : (cf_attrs){0};
    if (n->n_outputs > op->n_outputs) drop_outputs(g, n, op->n_outputs);
    for (int k = n->n_outputs; k < op->n_outputs; k++) {
        cf_tensor *t = cf_graph_new_tensor(g, "", CF_ROLE_ACTIVATION, CF_F32, 0, NULL);
        snprintf(t->name, sizeof t->name, "%s.%d.saved", op->name, t->id);
        t->producer = n;
        n->outputs[k] = t;
    }
    n->n_outputs = op->n_outputs;
    for (int k = 0; k < n->n_outputs; k++) n->outputs[k]->requires_grad = needs_grad && op->backward;
    cf_error err = {{0}};
    if (op->infer(n, &err) != 0) {
        cf_graph_fail(g, "fusion: op %s: %s", op->name, err.msg);
        return -1;
    }
    return 0;
}

void cf_graph_remove_node(cf_graph *g, cf_node *n) {
    drop_outputs(g, n, 0);
    int kept = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i] == n) continue;
        g->nodes[kept] = g->nodes[i];
        g->nodes[kept]->index = kept;
        kept++;
    }
    g->n_nodes = kept;
    free(n);
}

void cf_graph_move_node(cf_graph *g, cf_node *n, int index) {
    CF_ASSERT(index >= 0 && index < g->n_nodes && g->nodes[n->index] == n);
    int from = n->index, step = index > from ? 1 : -1;
    for (int i = from; i != index; i += step) {
        g->nodes[i] = g->nodes[i + step];
        g->nodes[i]->index = i;
    }
    g->nodes[index] = n;
    n->index = index;
}
