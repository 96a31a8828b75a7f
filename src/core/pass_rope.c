/* Fusion pass: RoPE on Q/K rotates in place. It only asks (cf_node.in_place); the
 * planner decides, giving the rotated tensor the unrotated one's storage when nothing
 * reads that afterwards (the projection's backward needs its input, not its output,
 * and rope's backward needs neither). */
#include "core/graph_internal.h"
#include "core/passes.h"
#include "kernels/graph_ops.h"

int cf_pass_rope_in_place(cf_graph *g) {
    int marked = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]->op == &cf_op_rope) {
            g->nodes[i]->in_place |= 1u;
            marked++;
        }
    return marked;
}
