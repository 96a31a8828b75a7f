/* Graph construction: tensors, leaves, nodes and the sticky first error. */
#include "core/graph_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROW(arr, n, cap)                                                                                              \
    do {                                                                                                               \
        if ((n) == (cap)) {                                                                                            \
            (cap) = (cap) ? 2 * (cap) : 16;                                                                            \
            (arr) = cf_xrealloc((arr), sizeof *(arr) * (size_t)(cap));                                                 \
        }                                                                                                              \
    } while (0)

cf_graph *cf_graph_create(void) {
    cf_graph *g = cf_xcalloc(1, sizeof *g);
    g->phase = CF_PHASE_FORWARD;
    return g;
}

void cf_graph_free(cf_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->n_tensors; i++) free(g->tensors[i]);
    for (int i = 0; i < g->n_nodes; i++) free(g->nodes[i]);
    for (int i = 0; i < g->n_consts; i++) free(g->consts[i].data);
    free(g->tensors);
    free(g->nodes);
    free(g->params);
    free(g->inits);
    free(g->streams);
    free(g->frozen);
    free(g->frozen_inits);
    free(g->frozen_streams);
    free(g->consts);
    free(g);
}

int cf_graph_error(const cf_graph *g, cf_error *err) {
    if (!g->failed) return 0;
    return cf_fail(err, "%s", g->error.msg);
}

cf_tensor *cf_graph_fail(cf_graph *g, const char *fmt, ...) {
    if (!g->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->error.msg, sizeof g->error.msg, fmt, ap);
        va_end(ap);
        g->failed = true;
    }
    return NULL;
}

static bool check_shape(cf_graph *g, const char *name, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > CF_MAX_DIMS) {
        cf_graph_fail(g, "tensor %s: %d dimensions (at most %d)", name, ndim, CF_MAX_DIMS);
        return false;
    }
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 1) {
            cf_graph_fail(g, "tensor %s: dimension %d is %lld", name, i, (long long)shape[i]);
            return false;
        }
    return true;
}

cf_tensor *cf_graph_new_tensor(cf_graph *g, const char *name, cf_role role, cf_dtype dtype, int ndim,
                               const int64_t *shape) {
    cf_tensor *t = cf_xcalloc(1, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
    t->param_offset = -1;
    t->id = g->n_tensors;
    GROW(g->tensors, g->n_tensors, g->cap_tensors);
    g->tensors[g->n_tensors++] = t;
    return t;
}

static bool can_change(cf_graph *g, const char *what) {
    if (g->failed) return false;
    if (g->planned) {
        cf_graph_fail(g, "%s: the graph is already planned", what);
        return false;
    }
    return true;
}

cf_tensor *cf_graph_input(cf_graph *g, const char *name, cf_dtype dtype, int ndim, const int64_t *shape) {
    if (!can_change(g, name) || !check_shape(g, name, ndim, shape)) return NULL;
    return cf_graph_new_tensor(g, name, CF_ROLE_INPUT, dtype, ndim, shape);
}

cf_tensor *cf_graph_param(cf_graph *g, const char *name, int ndim, const int64_t *shape, cf_init init,
                          bool weight_decay) {
    if (!can_change(g, name) || !check_shape(g, name, ndim, shape)) return NULL;
    if (g->blocks.params) return cf_graph_fail(g, "parameter %s: created after the parameter block was laid out", name);
    for (int i = 0; i < g->n_params; i++)
        if (strcmp(g->params[i]->name, name) == 0) return cf_graph_fail(g, "parameter %s: name used twice", name);
    cf_tensor *t = cf_graph_new_tensor(g, name, CF_ROLE_PARAM, CF_F32, ndim, shape);
    t->requires_grad = true;
    t->weight_decay = weight_decay;
    /* 16-float (64-byte) alignment of every parameter keeps vector loads aligned. */
    t->param_offset = g->param_elems;
    g->param_elems += (cf_tensor_numel(t) + 15) & ~(int64_t)15;
    if (g->n_params == g->cap_params) {
        g->cap_params = g->cap_params ? 2 * g->cap_params : 16;
        g->params = cf_xrealloc(g->params, sizeof *g->params * (size_t)g->cap_params);
        g->inits = cf_xrealloc(g->inits, sizeof *g->inits * (size_t)g->cap_params);
        g->streams = cf_xrealloc(g->streams, sizeof *g->streams * (size_t)g->cap_params);
    }
    g->streams[g->n_params] = g->n_created++;
    g->params[g->n_params] = t;
    g->inits[g->n_params++] = init;
    return t;
}

static bool frozen_dtype(cf_dtype d) {
    return d == CF_F32 || d == CF_BF16 || d == CF_F16 || d == CF_Q8_0 || d == CF_Q4_0;
}

/* Runs the infer rule of every node reading t again (after t's dtype changed); -1 with the
 * first refusal in err. */
static int recheck_readers(cf_graph *g, const cf_tensor *t, cf_error *err) {
    for (int i = 0; i < g->n_nodes; i++) {
        cf_node *n = g->nodes[i];
        bool reads = false;
        for (int k = 0; k < n->n_inputs; k++) reads |= n->inputs[k] == t;
        cf_error e = {{0}};
        if (reads && n->op->infer(n, &e) != 0) return cf_fail(err, "op %s: %s", n->op->name, e.msg);
    }
    return 0;
}

int cf_graph_param_freeze(cf_graph *g, cf_tensor *p, cf_dtype dtype, cf_error *err) {
    if (cf_graph_error(g, err)) return -1;
    if (!p) return cf_fail(err, "freeze: no parameter given");
    if (g->planned || g->differentiated || g->blocks.params)
        return cf_fail(err, "freeze %s: only before the backward pass, the parameter blocks and the plan", p->name);
    int at = 0;
    while (at < g->n_params && g->params[at] != p) at++;
    if (at == g->n_params)
        return cf_fail(err, "freeze %s: %s", p->name,
                       p->role == CF_ROLE_FROZEN ? "frozen already" : "not a trainable parameter of this graph");
    if (!frozen_dtype(dtype))
        return cf_fail(err, "freeze %s: dtype %s (frozen weights are f32, bf16, f16, q8_0 or q4_0)", p->name,
                       cf_dtype_name(dtype));
    for (int i = 0; i < g->n_tensors; i++)
        if (g->tensors[i]->view_of == p && dtype != CF_F32)
            return cf_fail(err, "freeze %s as %s: %s views it as f32", p->name, cf_dtype_name(dtype),
                           g->tensors[i]->name);
    p->dtype = dtype;
    p->role = CF_ROLE_FROZEN;
    p->requires_grad = false;
    cf_error why = {{0}};
    if (recheck_readers(g, p, &why) != 0) {
        p->dtype = CF_F32;
        p->role = CF_ROLE_PARAM;
        p->requires_grad = true;
        recheck_readers(g, p, &why); /* they took f32 before */
        return cf_fail(err, "freeze %s as %s: %s", p->name, cf_dtype_name(dtype), why.msg);
    }
    p->param_offset = -1;
    p->weight_decay = false;
    if (g->n_frozen == g->cap_frozen) {
        g->cap_frozen = g->cap_frozen ? 2 * g->cap_frozen : 16;
        g->frozen = cf_xrealloc(g->frozen, sizeof *g->frozen * (size_t)g->cap_frozen);
        g->frozen_inits = cf_xrealloc(g->frozen_inits, sizeof *g->frozen_inits * (size_t)g->cap_frozen);
        g->frozen_streams = cf_xrealloc(g->frozen_streams, sizeof *g->frozen_streams * (size_t)g->cap_frozen);
    }
    g->frozen[g->n_frozen] = p;
    g->frozen_inits[g->n_frozen] = g->inits[at];
    g->frozen_streams[g->n_frozen++] = g->streams[at];
    /* The block closes over the gap: later parameters move down, 64-byte aligned as before. */
    g->n_params--;
    g->param_elems = 0;
    for (int i = 0; i < g->n_params; i++) {
        if (i >= at) {
            g->params[i] = g->params[i + 1];
            g->inits[i] = g->inits[i + 1];
            g->streams[i] = g->streams[i + 1];
        }
        g->params[i]->param_offset = g->param_elems;
        g->param_elems += (cf_tensor_numel(g->params[i]) + 15) & ~(int64_t)15;
    }
    /* What still needs a gradient, now that p does not. */
    for (int i = 0; i < g->n_nodes; i++) {
        cf_node *n = g->nodes[i];
        bool needs = false;
        for (int k = 0; k < n->n_inputs; k++) needs |= n->inputs[k]->requires_grad;
        for (int k = 0; k < n->n_outputs; k++) n->outputs[k]->requires_grad = needs && n->op->backward;
    }
    return 0;
}

int cf_graph_num_frozen(const cf_graph *g) { return g->n_frozen; }
cf_tensor *cf_graph_frozen_at(const cf_graph *g, int i) { return g->frozen[i]; }

cf_tensor *cf_graph_const(cf_graph *g, const char *name, cf_dtype dtype, int ndim, const int64_t *shape,
                          const void *data) {
    if (!can_change(g, name) || !check_shape(g, name, ndim, shape)) return NULL;
    cf_tensor *t = cf_graph_new_tensor(g, name, CF_ROLE_CONST, dtype, ndim, shape);
    size_t bytes = cf_tensor_bytes(t);
    GROW(g->consts, g->n_consts, g->cap_consts);
    g->consts[g->n_consts].tensor = t;
    g->consts[g->n_consts++].data = memcpy(cf_xmalloc(bytes), data, bytes);
    return t;
}

void cf_graph_keep(cf_graph *g, cf_tensor *t) {
    if (!t || !can_change(g, t->name)) return;
    t->keep = true;
    if (t->view_of) t->view_of->keep = true; /* the storage it reads must survive too */
}

cf_tensor *cf_tensor_set_name(cf_tensor *t, const char *fmt, ...) {
    if (!t) return NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->name, sizeof t->name, fmt, ap);
    va_end(ap);
    return t;
}

cf_node *cf_graph_node_add(cf_graph *g, const cf_op_def *op, cf_tensor *const *inputs, int n_inputs,
                           const cf_attrs *attrs) {
    if (!can_change(g, op->name)) return NULL;
    if (n_inputs > CF_MAX_INPUTS || op->n_outputs > CF_MAX_OUTPUTS) {
        cf_graph_fail(g, "op %s: %d inputs, %d outputs (at most %d, %d)", op->name, n_inputs, op->n_outputs,
                      CF_MAX_INPUTS, CF_MAX_OUTPUTS);
        return NULL;
    }
    cf_node *n = cf_xcalloc(1, sizeof *n);
    n->op = op;
    n->n_inputs = n_inputs;
    n->n_outputs = op->n_outputs;
    n->phase = g->phase;
    if (attrs) n->attrs = *attrs;
    bool needs_grad = false;
    for (int i = 0; i < n_inputs; i++) {
        if (!inputs[i]) {
            free(n);
            cf_graph_fail(g, "op %s: input %d is missing", op->name, i);
            return NULL;
        }
        n->inputs[i] = inputs[i];
        needs_grad |= inputs[i]->requires_grad;
    }
    for (int k = 0; k < n->n_outputs; k++) {
        cf_tensor *t = cf_graph_new_tensor(g, "", CF_ROLE_ACTIVATION, CF_F32, 0, NULL);
        snprintf(t->name, sizeof t->name, "%s.%d%s", op->name, t->id, k ? ".saved" : "");
        t->producer = n;
        t->requires_grad = needs_grad && op->backward;
        n->outputs[k] = t;
    }
    cf_error err = {{0}};
    if (op->infer(n, &err) != 0) {
        cf_graph_fail(g, "op %s: %s", op->name, err.msg);
        for (int k = 0; k < n->n_outputs; k++) n->outputs[k]->producer = NULL; /* orphaned, freed with the graph */
        free(n);
        return NULL;
    }
    n->index = g->n_nodes;
    GROW(g->nodes, g->n_nodes, g->cap_nodes);
    g->nodes[g->n_nodes++] = n;
    return n;
}

void cf_node_output(cf_node *node, int k, cf_dtype dtype, int ndim, const int64_t *shape) {
    cf_tensor *t = node->outputs[k];
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
}

void cf_node_output_like(cf_node *node, int k, const cf_tensor *like) {
    cf_node_output(node, k, like->dtype, like->ndim, like->shape);
}

int cf_graph_num_nodes(const cf_graph *g) { return g->n_nodes; }
cf_node *cf_graph_node(const cf_graph *g, int i) { return g->nodes[i]; }
int cf_graph_num_tensors(const cf_graph *g) { return g->n_tensors; }
cf_tensor *cf_graph_tensor(const cf_graph *g, int i) { return g->tensors[i]; }

cf_tensor *cf_graph_find(const cf_graph *g, const char *name) {
    for (int i = 0; i < g->n_tensors; i++)
        if (strcmp(g->tensors[i]->name, name) == 0) return g->tensors[i];
    return NULL;
}

int cf_graph_num_params(const cf_graph *g) { return g->n_params; }
cf_tensor *cf_graph_param_at(const cf_graph *g, int i) { return g->params[i]; }
cf_init cf_graph_param_init(const cf_graph *g, int i) { return g->inits[i]; }
int64_t cf_graph_param_elems(const cf_graph *g) { return g->param_elems; }

void cf_graph_optimizer_range(const cf_graph *g, int64_t *lo, int64_t *hi) {
    *lo = g->opt_hi ? g->opt_lo : 0;
    *hi = g->opt_hi ? g->opt_hi : g->param_elems;
}

int cf_graph_shard_optimizer(cf_graph *g, int64_t lo, int64_t hi, cf_error *err) {
    if (g->planned) return cf_fail(err, "optimizer shard: the graph is already planned");
    if (lo < 0 || hi <= lo || hi > g->param_elems)
        return cf_fail(err, "optimizer shard [%lld, %lld) is not inside the %lld parameters", (long long)lo,
                       (long long)hi, (long long)g->param_elems);
    cf_param_blocks b = cf_graph_blocks(g);
    g->opt_lo = lo;
    g->opt_hi = hi;
    b.adam_m->shape[0] = b.adam_v->shape[0] = hi - lo;
    return 0;
}

cf_tensor *cf_graph_grads_on(cf_graph *g) {
    if (!g->grads_on && !g->failed) g->grads_on = cf_graph_new_tensor(g, "grads_on", CF_ROLE_INPUT, CF_F32, 0, NULL);
    return g->grads_on;
}

cf_param_blocks cf_graph_blocks(cf_graph *g) {
    if (!g->blocks.params && !g->failed) {
        int64_t n[1] = {g->param_elems ? g->param_elems : 1};
        g->blocks.params = cf_graph_new_tensor(g, "params", CF_ROLE_PARAM, CF_F32, 1, n);
        g->blocks.grads = cf_graph_new_tensor(g, "grads", CF_ROLE_GRAD, CF_F32, 1, n);
        g->blocks.adam_m = cf_graph_new_tensor(g, "adam_m", CF_ROLE_OPT_STATE, CF_F32, 1, n);
        g->blocks.adam_v = cf_graph_new_tensor(g, "adam_v", CF_ROLE_OPT_STATE, CF_F32, 1, n);
        g->blocks.step = cf_graph_new_tensor(g, "step", CF_ROLE_OPT_STATE, CF_I32, 0, NULL);
        g->blocks.params->param_offset = g->blocks.grads->param_offset = 0;
        g->blocks.adam_m->param_offset = g->blocks.adam_v->param_offset = 0;
    }
    return g->blocks;
}
