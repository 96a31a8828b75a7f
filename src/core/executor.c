/* The executor: runs planned nodes in order, in the engine's floating-point mode
 * (denormals as zero, core/denormals.h; the caller's mode comes back after). Kernels split
 * their own work over the thread pool; nothing here allocates. A kernel that meets bad
 * data reports it through the run's error slot (core/kernel_status.h), and the run stops
 * after that node. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "core/denormals.h"
#include "core/graph_internal.h"
#include "core/kernel_status.h"
#include "core/plan_run.h"

_Thread_local cf_kernel_status *cf_kernel_status_current;

void cf_kernel_fail(const char *fmt, ...) {
    cf_kernel_status *s = cf_kernel_status_current;
    CF_ASSERT(s != NULL); /* kernels run only inside cf_plan_run */
    if (atomic_exchange_explicit(&s->failed, true, memory_order_relaxed)) return; /* the first failure is kept */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    va_end(ap);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cf_plan_run(cf_plan *p, unsigned phases, cf_error *err) {
    const cf_graph *g = p->graph;
    cf_kernel_status status = {.failed = false}, *outer = cf_kernel_status_current;
    cf_kernel_status_current = &status;
    unsigned fp_mode = cf_denormals_off();
    if (g->grads_on) *(float *)g->grads_on->data = phases & CF_PHASE_BACKWARD ? 1.0f : 0.0f;
    int rc = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const cf_node *n = g->nodes[i];
        if (!(n->phase & phases) || (n->weights_copy && (phases & CF_RUN_WEIGHTS_CURRENT))) continue;
        cf_kernel_fn kernel = n->op->kernels[p->backend];
        if (!p->hook) {
            kernel(n);
        } else {
            double start = now_seconds();
            kernel(n);
            p->hook(p->hook_ctx, n, now_seconds() - start);
        }
        if (atomic_load_explicit(&status.failed, memory_order_relaxed)) {
            rc = cf_fail(err, "%s (node %d): %s", n->op->name, n->index, status.msg);
            break;
        }
    }
    cf_fp_mode_restore(fp_mode);
    cf_kernel_status_current = outer;
    return rc;
}

void cf_plan_set_hook(cf_plan *p, cf_node_hook hook, void *ctx) {
    p->hook = hook;
    p->hook_ctx = ctx;
}
