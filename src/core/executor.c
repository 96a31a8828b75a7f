/* The executor: runs planned nodes in order, in the engine's floating-point mode
 * (denormals as zero, core/denormals.h; the caller's mode comes back after). Kernels split
 * their own work over the thread pool; nothing here allocates. */
#include <time.h>

#include "core/denormals.h"
#include "core/graph_internal.h"
#include "core/plan_run.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cf_plan_run(cf_plan *p, unsigned phases) {
    const cf_graph *g = p->graph;
    unsigned fp_mode = cf_denormals_off();
    if (g->grads_on) *(float *)g->grads_on->data = phases & CF_PHASE_BACKWARD ? 1.0f : 0.0f;
    for (int i = 0; i < g->n_nodes; i++) {
        const cf_node *n = g->nodes[i];
        if (!(n->phase & phases) || (n->weights_copy && (phases & CF_RUN_WEIGHTS_CURRENT))) continue;
        if (!p->hook) {
            n->op->forward(n);
            continue;
        }
        double start = now_seconds();
        n->op->forward(n);
        p->hook(p->hook_ctx, n, now_seconds() - start);
    }
    cf_fp_mode_restore(fp_mode);
}

void cf_plan_set_hook(cf_plan *p, cf_node_hook hook, void *ctx) {
    p->hook = hook;
    p->hook_ctx = ctx;
}
