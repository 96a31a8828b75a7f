/* Activation recomputation (recompute_config), a pass over a differentiated graph.
 *
 * A segment is a set of forward nodes: a whole transformer layer (`recompute`, the first
 * `recompute_layers` or all), or one attention / SwiGLU / GELU node (`select_recompute`,
 * in the layers not recomputed whole). The tensors a segment computes
 * that backward nodes read are no longer read from the forward: the segment's nodes
 * that make them are cloned, in their forward order, into the backward just before the
 * first backward node that reads one of them, and the backward reads the clones. The
 * originals then die at their last forward reader, so the planner packs a shorter
 * arena. A whole layer keeps its checkpoints: the tensors that forward nodes outside
 * the layer read (the residual stream), which its clones read as inputs. Nodes that
 * write an input in place or make a gradient are never cloned (they stay outside).
 *
 * The clones run the same kernels on the same inputs in the same order as the forward,
 * so losses and gradients are bit-identical to the graph without the pass (kernels are
 * deterministic for a given thread count; tests/test_recompute.c checks it).
 *
 * The layer of a forward node comes from the parameters it reads (the first all-digit
 * component of the name: model.layers.3.*, transformer.h.3.*); a parameter without one
 * (embeddings, the final norm, the head) puts the node outside every layer. A node
 * that reads no parameter is in the latest layer of its inputs' producers. */
#include "core/passes.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/graph_internal.h"
#include "kernels/graph_ops.h"

/* The layer index in a parameter name, or -1 when it has none. */
static int name_layer(const char *name) {
    const char *s = name;
    while (*s) {
        const char *end = s;
        while (*end && *end != '.') end++;
        if (end > s && end - s < 9) {
            bool digits = true;
            for (const char *c = s; c < end; c++) digits &= isdigit((unsigned char)*c) != 0;
            if (digits) return atoi(s);
        }
        s = *end ? end + 1 : end;
    }
    return -1;
}

/* layer[i] for the forward nodes 0 .. n_fwd-1, as described at the top. */
static void node_layers(const cf_graph *g, int n_fwd, int *layer) {
    for (int i = 0; i < n_fwd; i++) {
        const cf_node *n = g->nodes[i];
        int from_params = -2, from_inputs = -1;
        for (int k = 0; k < n->n_inputs; k++) {
            const cf_tensor *x = n->inputs[k];
            if (x->role == CF_ROLE_PARAM) {
                int l = name_layer(x->name);
                from_params = from_params == -2 ? l : (l < 0 || from_params < 0) ? -1 : (l > from_params ? l : from_params);
            } else if (x->producer && x->producer->index < i) {
                int l = layer[x->producer->index];
                if (l > from_inputs) from_inputs = l;
            }
        }
        layer[i] = from_params != -2 ? from_params : from_inputs;
    }
}

static bool selective_op(const cf_op_def *op) {
    return op == &cf_op_attention || op == &cf_op_swiglu || op == &cf_op_gelu;
}

/* Whether running n a second time changes nothing but its own outputs: no input written
 * in place, every output an activation (not, say, a gradient added into its block). */
static bool repeatable(const cf_node *n) {
    if (n->op->mutates || n->accumulate) return false;
    for (int k = 0; k < n->n_outputs; k++)
        if (n->outputs[k]->role != CF_ROLE_ACTIVATION) return false;
    return true;
}

typedef struct rc_state {
    cf_graph *g;
    int n_fwd, n_nodes, n_tensors; /* before the pass */
    int *seg;           /* per forward node: segment id, -1 none */
    bool *whole;        /* per segment: a whole layer (keeps checkpoints) */
    bool *clone;        /* per forward node: cloned */
    bool *needed;       /* per tensor id: read by backward, to be read from a clone */
    cf_tensor **copy;   /* per tensor id (original tensors): its clone */
    int *insert_at;     /* per segment: the backward node the clones go before; n_nodes none */
} rc_state;

/* Whether a forward node outside segment s reads t (directly or through a view of t). */
static bool read_outside(const rc_state *st, const cf_tensor *t, int s) {
    for (int i = 0; i < st->n_fwd; i++) {
        const cf_node *n = st->g->nodes[i];
        if (st->seg[i] == s) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == t || n->inputs[k]->view_of == t) return true;
    }
    return false;
}

/* Marks the tensors of segment members that backward reads and must come from clones,
 * and where each segment's clones go. */
static void mark_needed(rc_state *st) {
    cf_graph *g = st->g;
    for (int i = st->n_fwd; i < st->n_nodes; i++) {
        cf_node *n = g->nodes[i];
        if (n->phase != CF_PHASE_BACKWARD) continue;
        for (int k = 0; k < n->n_inputs; k++) {
            cf_tensor *t = n->inputs[k];
            cf_node *p = t->producer;
            if (!p || p->index >= st->n_fwd || st->seg[p->index] < 0 || t->keep) continue;
            int s = st->seg[p->index];
            if (!st->needed[t->id] && st->whole[s] && read_outside(st, t, s)) continue; /* a checkpoint */
            st->needed[t->id] = true;
            st->clone[p->index] = true;
            if (i < st->insert_at[s]) st->insert_at[s] = i;
        }
    }
}

/* Clones also the segment members whose outputs the clones read, back to the segment's
 * inputs and checkpoints (walked backwards: a node's inputs come before it). */
static void close_clones(rc_state *st) {
    for (int i = st->n_fwd - 1; i >= 0; i--) {
        if (!st->clone[i]) continue;
        cf_node *n = st->g->nodes[i];
        int s = st->seg[i];
        for (int k = 0; k < n->n_inputs; k++) {
            cf_tensor *x = n->inputs[k];
            cf_tensor *root = cf_tensor_root(x);
            cf_tensor *ts[2] = {x, root};
            for (int j = 0; j < 2; j++) {
                cf_node *p = ts[j]->producer;
                if (!p || p->index >= st->n_fwd || st->seg[p->index] != s) continue;
                if (st->whole[s] && read_outside(st, ts[j], s)) continue;
                st->clone[p->index] = true;
            }
        }
    }
}

/* The clone of t when t was made by a cloned member of segment s, else t itself. */
static cf_tensor *mapped(const rc_state *st, cf_tensor *t, int s) {
    if (!t || t->id >= st->n_tensors || !st->copy[t->id]) return t;
    const cf_node *p = t->producer;
    return p && p->index < st->n_fwd && st->seg[p->index] == s ? st->copy[t->id] : t;
}

/* A copy of forward node n for the backward phase, reading the clones made so far. */
static cf_node *clone_node(rc_state *st, const cf_node *n, int s) {
    cf_node *c = cf_xmalloc(sizeof *c);
    *c = *n;
    c->phase = CF_PHASE_BACKWARD;
    c->accumulate = 0;
    c->workspace = NULL;
    for (int k = 0; k < n->n_inputs; k++) c->inputs[k] = mapped(st, n->inputs[k], s);
    for (int k = 0; k < n->n_outputs; k++) {
        const cf_tensor *o = n->outputs[k];
        cf_tensor *t = cf_graph_new_tensor(st->g, "", CF_ROLE_ACTIVATION, o->dtype, o->ndim, o->shape);
        snprintf(t->name, sizeof t->name, "%.*s.re", (int)sizeof t->name - 4, o->name);
        t->producer = c;
        t->view_of = mapped(st, o->view_of, s);
        t->view_offset = o->view_offset;
        c->outputs[k] = t;
        st->copy[o->id] = t;
    }
    return c;
}

/* Backward nodes (old[n_fwd ..]) read the clones; views they make of a recomputed
 * tensor alias the clone. */
static void redirect_backward(rc_state *st, cf_node *const *old) {
    for (int i = st->n_fwd; i < st->n_nodes; i++) {
        cf_node *n = old[i];
        if (n->phase != CF_PHASE_BACKWARD) continue;
        for (int k = 0; k < n->n_inputs; k++)
            if (st->needed[n->inputs[k]->id]) n->inputs[k] = st->copy[n->inputs[k]->id];
        for (int o = 0; o < n->n_outputs; o++) {
            cf_tensor *t = n->outputs[o];
            if (!t->view_of || t->view_of->id >= st->n_tensors || !st->copy[t->view_of->id]) continue;
            for (int k = 0; k < n->n_inputs; k++)
                if (cf_tensor_root(n->inputs[k]) == st->copy[t->view_of->id]) t->view_of = st->copy[t->view_of->id];
        }
    }
}

/* The new execution order: each segment's clones, in forward order, before the
 * backward node where they are first needed. Returns the number of clones. */
static int insert_clones(rc_state *st, int n_seg) {
    cf_graph *g = st->g;
    int n_clones = 0;
    for (int i = 0; i < st->n_fwd; i++) n_clones += st->clone[i];
    if (!n_clones) return 0;
    cf_node **old = g->nodes, **order = cf_xmalloc(sizeof *order * (size_t)(st->n_nodes + n_clones));
    int m = 0;
    for (int i = 0; i < st->n_nodes; i++) {
        for (int s = 0; s < n_seg; s++) {
            if (st->insert_at[s] != i) continue;
            for (int j = 0; j < st->n_fwd; j++)
                if (st->clone[j] && st->seg[j] == s) order[m++] = clone_node(st, old[j], s);
        }
        order[m++] = old[i];
    }
    for (int i = 0; i < m; i++) order[i]->index = i;
    redirect_backward(st, old);
    g->nodes = order;
    g->n_nodes = g->cap_nodes = m;
    free(old);
    return n_clones;
}

int cf_graph_recompute(cf_graph *g, const cf_recompute_config *rc, cf_error *err) {
    if (cf_graph_error(g, err)) return -1;
    if (g->planned) return cf_fail(err, "recompute: the graph is already planned");
    if (!g->differentiated) return cf_fail(err, "recompute: the graph has no backward pass yet");
    if (!rc->recompute && !rc->select_recompute) return 0;
    rc_state st = {.g = g, .n_nodes = g->n_nodes, .n_tensors = g->n_tensors};
    while (st.n_fwd < g->n_nodes && g->nodes[st.n_fwd]->phase == CF_PHASE_FORWARD) st.n_fwd++;
    int *layer = cf_xmalloc(sizeof *layer * (size_t)(st.n_fwd + 1));
    node_layers(g, st.n_fwd, layer);
    int n_layers = 0;
    for (int i = 0; i < st.n_fwd; i++)
        if (layer[i] + 1 > n_layers) n_layers = layer[i] + 1;
    /* segment ids: layer l is l, a selected node i is n_layers + i */
    int n_seg = n_layers + st.n_fwd;
    st.seg = cf_xmalloc(sizeof *st.seg * (size_t)(st.n_fwd + 1));
    st.whole = cf_xcalloc((size_t)n_seg + 1, sizeof *st.whole);
    st.clone = cf_xcalloc((size_t)st.n_fwd + 1, sizeof *st.clone);
    st.needed = cf_xcalloc((size_t)st.n_tensors + 1, sizeof *st.needed);
    st.copy = cf_xcalloc((size_t)st.n_tensors + 1, sizeof *st.copy);
    st.insert_at = cf_xmalloc(sizeof *st.insert_at * (size_t)(n_seg + 1));
    for (int s = 0; s < n_seg; s++) st.insert_at[s] = st.n_nodes;
    for (int i = 0; i < st.n_fwd; i++) {
        st.seg[i] = -1;
        if (layer[i] < 0 || !repeatable(g->nodes[i])) continue;
        if (rc->recompute && (rc->recompute_layers <= 0 || layer[i] < rc->recompute_layers)) {
            st.seg[i] = layer[i];
            st.whole[layer[i]] = true;
        } else if (rc->select_recompute && selective_op(g->nodes[i]->op)) {
            st.seg[i] = n_layers + i;
        }
    }
    mark_needed(&st);
    close_clones(&st);
    int n_clones = insert_clones(&st, n_seg);
    free(layer);
    free(st.seg);
    free(st.whole);
    free(st.clone);
    free(st.needed);
    free(st.copy);
    free(st.insert_at);
    return n_clones;
}
