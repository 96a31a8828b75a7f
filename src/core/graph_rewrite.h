/* Internal: primitives the fusion passes rewrite a graph with, before autodiff. */
#ifndef CFORMERS_GRAPH_REWRITE_H
#define CFORMERS_GRAPH_REWRITE_H

#include "core/graph_internal.h"

/* Number of node inputs that read t. */
int cf_graph_readers(const cf_graph *g, const cf_tensor *t);

/* Makes every node that reads `old` (and every view of it) use `replacement` instead;
 * `replacement` also takes over old's name and keep flag. */
void cf_graph_replace_uses(cf_graph *g, cf_tensor *old, cf_tensor *replacement);

/* Turns node n into a node of `op` over new inputs, in the same place: existing
 * outputs are kept in order (so tensors others hold, like the loss, stay valid), extra
 * ones created, surplus ones must be unread and are dropped; the op's infer rule then
 * shapes them. Returns -1 (error recorded in g) when the inputs do not fit. */
int cf_graph_retarget_node(cf_graph *g, cf_node *n, const cf_op_def *op, cf_tensor *const *inputs, int n_inputs,
                           const cf_attrs *attrs);

/* Removes node n and its outputs, which no node may read any more; renumbers the
 * remaining nodes and tensors. */
void cf_graph_remove_node(cf_graph *g, cf_node *n);

/* Moves node n to execution position `index` (0 .. n_nodes-1), shifting the nodes
 * between and renumbering them; for passes that insert a node after a given one (the
 * gradient all-reduce starts). The caller keeps the order valid: n after its inputs'
 * producers and before its outputs' readers. */
void cf_graph_move_node(cf_graph *g, cf_node *n, int index);

#endif
