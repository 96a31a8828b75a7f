/* Internal layout of cf_graph, shared by the graph builder, autodiff, planner and
 * executor. */
#ifndef CFORMERS_GRAPH_INTERNAL_H
#define CFORMERS_GRAPH_INTERNAL_H

#include "cformers/graph.h"

typedef struct cf_const_data {
    cf_tensor *tensor;
    void *data;
} cf_const_data;

struct cf_graph {
    cf_tensor **tensors;
    int n_tensors, cap_tensors;
    cf_node **nodes;
    int n_nodes, cap_nodes;

    cf_tensor **params; /* in block order */
    cf_init *inits;
    int *streams; /* per parameter: its creation index, its initialisation stream */
    int n_params, cap_params;
    cf_tensor **frozen; /* cf_graph_param_freeze order; each keeps its init and stream */
    cf_init *frozen_inits;
    int *frozen_streams;
    int n_frozen, cap_frozen;
    int n_created; /* parameters ever created (trainable or frozen): the next stream */
    int64_t param_elems;
    int64_t opt_lo, opt_hi; /* optimizer shard (ZeRO-1); opt_hi 0: the whole block */
    cf_param_blocks blocks; /* created on first request */
    cf_tensor *grads_on;    /* cf_graph_grads_on: created on first request */

    cf_const_data *consts;
    int n_consts, cap_consts;

    cf_phase phase;      /* given to nodes as they are added */
    bool differentiated; /* cf_graph_backward ran */
    bool planned;        /* a plan holds it: no more changes */
    bool failed;
    cf_error error;
};

/* A new tensor owned by the graph (zeroed fields, param_offset -1). */
cf_tensor *cf_graph_new_tensor(cf_graph *g, const char *name, cf_role role, cf_dtype dtype, int ndim,
                               const int64_t *shape);

/* An f32 scalar input the executor sets before each run: 1 when the run includes the
 * backward phase, 0 for a forward alone (an evaluation). Ops that add into the gradient
 * block from the forward read it, so an evaluation leaves the gradients alone. */
cf_tensor *cf_graph_grads_on(cf_graph *g);

/* The tensor whose storage t uses (t itself unless it is a view). */
static inline cf_tensor *cf_tensor_root(cf_tensor *t) { return t->view_of ? t->view_of : t; }

#endif
