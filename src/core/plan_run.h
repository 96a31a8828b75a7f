/* Internal: the plan object, shared by plan.c (memory) and executor.c (running). */
#ifndef CFORMERS_PLAN_RUN_H
#define CFORMERS_PLAN_RUN_H

#include "cformers/plan.h"

struct cf_plan {
    cf_graph *graph;
    cf_backend backend; /* whose column of each op's kernels runs (CF_BACKEND_CPU today) */
    cf_memory_report report;
    char *arena, *io, *frozen; /* frozen: the frozen weights, each in its dtype, 64-byte aligned */
    float *params, *grads, *adam_m, *adam_v;
    int32_t *step;
    cf_node_hook hook;
    void *hook_ctx;
    /* cf_plan_set_arenas: n_arenas activation arenas of report.arena_bytes (arenas[0] is
     * the plan's own), `arena` the one bound now. */
    char **arenas;
    int n_arenas;
};

#endif
