/* Recording: the node hook and the step marks. Nothing here allocates after create. */
#include "obs/profile.h"

#include <pthread.h>
#include <stdlib.h>

#include "obs/clock.h"

/* The profiler that records other threads' spans, and the serial of the newest one. */
static pthread_mutex_t side_lock = PTHREAD_MUTEX_INITIALIZER;
static cf_profiler *side_owner;
static uint32_t side_serial;

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
    p->cap_side = steps < 1024 ? 64 * steps + 64 : 65536; /* loader batches and saves */
    p->side = cf_xmalloc(sizeof *p->side * (size_t)p->cap_side);
    pthread_mutex_lock(&side_lock);
    p->serial = ++side_serial ? side_serial : ++side_serial; /* never 0 */
    pthread_mutex_unlock(&side_lock);
    return p;
}

uint64_t cf_profile_side_begin(cf_profile_lane lane, int index, const char *name) {
    uint64_t handle = 0;
    double now = cf_clock_seconds();
    pthread_mutex_lock(&side_lock);
    cf_profiler *p = side_owner;
    if (p && p->n_side < p->cap_side) {
        p->side[p->n_side] = (cf_profile_side_span){lane, index, name, now, -1.0};
        handle = (uint64_t)p->serial << 32 | (uint64_t)++p->n_side;
    } else if (p) {
        p->dropped_side++;
    }
    pthread_mutex_unlock(&side_lock);
    return handle;
}

void cf_profile_side_end(uint64_t handle) {
    if (!handle) return;
    double now = cf_clock_seconds();
    pthread_mutex_lock(&side_lock);
    cf_profiler *p = side_owner;
    if (p && p->serial == (uint32_t)(handle >> 32)) {
        cf_profile_side_span *s = &p->side[(handle & 0xffffffffu) - 1];
        s->seconds = now - s->start;
    }
    pthread_mutex_unlock(&side_lock);
}

int64_t cf_profiler_side_spans(const cf_profiler *p, cf_profile_side_span *out) {
    pthread_mutex_lock(&side_lock);
    int64_t n = p->n_side;
    for (int64_t i = 0; i < n; i++) out[i] = p->side[i];
    pthread_mutex_unlock(&side_lock);
    return n;
}

void cf_profiler_free(cf_profiler *p) {
    if (!p) return;
    pthread_mutex_lock(&side_lock);
    if (side_owner == p) side_owner = NULL;
    pthread_mutex_unlock(&side_lock);
    free(p->side);
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
    if (p->steps == 0) { /* other threads' spans count from here (not the steps before the window) */
        p->first_step = step;
        pthread_mutex_lock(&side_lock);
        side_owner = p;
        pthread_mutex_unlock(&side_lock);
    }
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
