/* Reverse-mode autodiff: walks the forward nodes backwards, asking each op's backward
 * rule for its inputs' gradients, summing the contributions to tensors used more than
 * once, and adding each contribution to a parameter's gradient into the gradient block
 * as soon as the node that makes it has run. */
#include <stdio.h>
#include <stdlib.h>

#include "core/graph_internal.h"
#include "kernels/graph_ops.h"

static void add_contribution(cf_graph *g, cf_tensor **grads, cf_tensor *x, cf_tensor *dx) {
    if (!cf_tensor_same_shape(x, dx)) {
        char a[96], b[96];
        cf_graph_fail(g, "backward: gradient %s %s does not match %s %s", dx->name, cf_tensor_shape_str(dx, a, sizeof a),
                      x->name, cf_tensor_shape_str(x, b, sizeof b));
        return;
    }
    grads[x->id] = grads[x->id] ? cf_nn_add(g, grads[x->id], dx) : dx;
}

static void accumulate_param(cf_graph *g, cf_tensor *const *grads, int n_grads, cf_tensor *p, int at);

/* A parameter's contributions go into the gradient block one by one, right after the
 * node that makes each (a tied embedding's head part at the start of backward, its
 * rows at the end), never summed first into a temporary of the parameter's size. */
static void backprop_node(cf_graph *g, cf_tensor **grads, int n_grads, const cf_node *n) {
    cf_tensor *dy[CF_MAX_OUTPUTS] = {0}, *dx[CF_MAX_INPUTS] = {0};
    bool any = false;
    for (int k = 0; k < n->n_outputs; k++) any |= (dy[k] = grads[n->outputs[k]->id]) != NULL;
    if (!any || !n->op->backward) return;
    n->op->backward(g, n, dy, dx);
    for (int i = 0; i < n->n_inputs && !g->failed; i++)
        if (dx[i] && n->inputs[i]->requires_grad) add_contribution(g, grads, n->inputs[i], dx[i]);
    for (int i = 0; i < n->n_inputs && !g->failed; i++) {
        cf_tensor *p = n->inputs[i];
        if (p->role == CF_ROLE_PARAM && !p->view_of && p->id < n_grads && grads[p->id]) {
            accumulate_param(g, grads, n_grads, p, n->index);
            grads[p->id] = NULL;
        }
    }
}

/* Output k of dp's producer, when that op can add into it, nothing else reads dp and
 * dp is not also the gradient of another tensor still to be back-propagated (as when
 * p + x passes one dy to both; a tensor made at or after node `at`, such as the output of
 * the cast that p's gradient passed through, is done with its gradient). */
static int accumulating_output(const cf_graph *g, cf_tensor *const *grads, int n_grads, const cf_tensor *p,
                               const cf_tensor *dp, int at) {
    const cf_node *n = dp->producer;
    if (!n || dp->view_of || dp->role != CF_ROLE_ACTIVATION) return -1;
    for (int i = 0; i < n_grads; i++) {
        const cf_node *made_by = g->tensors[i]->producer;
        if (grads[i] == dp && i != p->id && !(made_by && made_by->index >= at)) return -1;
    }
    int k = 0;
    while (k < n->n_outputs && n->outputs[k] != dp) k++;
    if (!(n->op->accumulate_outputs >> k & 1u)) return -1;
    for (int i = n->index + 1; i < g->n_nodes; i++)
        for (int j = 0; j < g->nodes[i]->n_inputs; j++)
            if (cf_tensor_root(g->nodes[i]->inputs[j]) == dp) return -1;
    return k;
}

/* Adds a contribution to parameter p's gradient into its view of the gradient block, so
 * contributions and micro-batches accumulate: directly by the op that computes it when it
 * can, else by a grad_accumulate node. */
static void accumulate_param(cf_graph *g, cf_tensor *const *grads, int n_grads, cf_tensor *p, int at) {
    cf_tensor *dp = grads[p->id];
    int k = accumulating_output(g, grads, n_grads, p, dp, at);
    cf_tensor *view = k >= 0 ? dp : cf_graph_new_tensor(g, "", CF_ROLE_GRAD, CF_F32, p->ndim, p->shape);
    cf_tensor_set_name(view, "%s.grad", p->name);
    view->role = CF_ROLE_GRAD;
    view->param_offset = p->param_offset;
    p->grad = view;
    if (k >= 0)
        dp->producer->accumulate |= 1u << k;
    else
        cf_graph_node_add(g, &cf_op_grad_accumulate, (cf_tensor *[]){view, dp}, 2, NULL);
}

int cf_graph_backward_from(cf_graph *g, cf_tensor *y, cf_tensor *dy, cf_error *err) {
    if (g->failed) return cf_graph_error(g, err);
    if (g->differentiated) return cf_fail(err, "backward: the graph already has a backward pass");
    if (!y->requires_grad) return cf_fail(err, "backward: %s does not depend on any parameter", y->name);
    if (dy && (!cf_tensor_same_shape(y, dy) || dy->dtype != CF_F32))
        return cf_fail(err, "backward: seed %s must be f32 and shaped like %s", dy->name, y->name);
    int n_nodes = g->n_nodes;
    int n_tensors = g->n_tensors; /* the forward's; backward nodes add more */
    cf_tensor **grads = cf_xcalloc((size_t)n_tensors, sizeof *grads);
    cf_phase saved = g->phase;
    g->phase = CF_PHASE_BACKWARD;
    if (!dy) {
        float one = 1.0f;
        dy = cf_graph_const(g, "loss.seed", CF_F32, 0, NULL, &one);
    }
    grads[y->id] = dy;
    for (int k = n_nodes - 1; k >= 0 && !g->failed; k--) backprop_node(g, grads, n_tensors, g->nodes[k]);
    for (int i = 0; i < n_tensors; i++)
        if (g->tensors[i]->role != CF_ROLE_PARAM) g->tensors[i]->grad = grads[i];
    g->phase = saved;
    g->differentiated = true;
    free(grads);
    return cf_graph_error(g, err);
}

int cf_graph_backward(cf_graph *g, cf_tensor *loss, cf_error *err) {
    if (loss && cf_tensor_numel(loss) != 1) return cf_fail(err, "backward: loss %s is not a scalar", loss->name);
    return cf_graph_backward_from(g, loss, NULL, err);
}
