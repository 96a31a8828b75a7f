/* Recording: the node hook and the step marks. Nothing here allocates after create. */
#include "obs/profile.h"

#include <stdlib.h>

#include "obs/clock.h"

cf_profile_phase cf_profile_phase_of(const cf_node *node) {
    if (node->phase & CF_PHASE_UPDATE) return CF_PROFILE_OPTIMIZER;
    return node->phase & CF_PHASE_BACKWARD ? CF_PROFILE_BACKWARD : CF_PROFILE_FORWARD;
}

/* Events of one step: forward and backward nodes once per micro-batch, the update
 * nodes once, and the step and data-loader spans. */
static int64_t events_per_step(const cf_graph *g, int64_t micro_batches) {
    int64_t n = 2;
    for (int i = 0; i < cf_graph_num_nodes(g); i++)
        n += cf_graph_node(g, i)->phase & CF_PHASE_UPDATE ? 1 : micro_batches;
    return n;
}

cf_profiler *cf_profiler_create(const cf_graph *g, int64_t steps, int64_t micro_batches, int64_t comm_spans) {
    cf_profiler *p = cf_xcalloc(1, sizeof *p);
    p->graph = g;
    int64_t per_step = events_per_step(g, micro_batches) + comm_spans;
    p->cap_events = steps < CF_PROFILE_MAX_EVENTS / per_step ? steps * per_step : CF_PROFILE_MAX_EVENTS;
    p->events = cf_xmalloc(sizeof *p->events * (size_t)p->cap_events);
    p->node_seconds = cf_xcalloc((size_t)cf_graph_num_nodes(g), sizeof *p->node_seconds);
    p->node_calls = cf_xcalloc((size_t)cf_graph_num_nodes(g), sizeof *p->node_calls);
    return p;
}

void cf_profiler_free(cf_profiler *p) {
    if (!p) return;
    free(p->events);
    free(p->node_seconds);
    free(p->node_calls);
    free(p);
}

/* The new event, or NULL when the timeline is full. */
static cf_profile_event *record(cf_profiler *p, const cf_node *node, bool whole_step, double start, double seconds) {
    if (p->n_events == p->cap_events) {
        p->dropped_events++;
        return NULL;
    }
    cf_profile_event *e = &p->events[p->n_events++];
    *e = (cf_profile_event){node, start, seconds, p->step, whole_step, 0, false};
    return e;
}

void cf_profiler_comm(cf_profiler *p, double start, double seconds, int64_t elems, bool compressed) {
    cf_profile_event *e = record(p, NULL, false, start, seconds);
    if (!e) return;
    e->comm_elems = elems > 0 ? elems : 1;
    e->compressed = compressed;
}

void cf_profiler_step_begin(cf_profiler *p, int64_t step) {
    if (p->steps == 0) p->first_step = step;
    p->step = step;
    p->step_start = cf_clock_seconds();
}

void cf_profiler_data_done(cf_profiler *p) {
    double seconds = cf_clock_seconds() - p->step_start;
    p->data_seconds += seconds;
    record(p, NULL, false, p->step_start, seconds);
}

void cf_profiler_step_end(cf_profiler *p) {
    double seconds = cf_clock_seconds() - p->step_start;
    p->step_seconds += seconds;
    p->steps++;
    record(p, NULL, true, p->step_start, seconds);
}

/* The executor reports a node's duration right after it ends, so it started that long
 * before now. */
void cf_profiler_node_done(void *ctx, const cf_node *node, double seconds) {
    cf_profiler *p = ctx;
    p->node_seconds[node->index] += seconds;
    p->node_calls[node->index]++;
    record(p, node, false, cf_clock_seconds() - seconds, seconds);
}
