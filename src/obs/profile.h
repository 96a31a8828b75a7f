/* Per-op profile of training steps (callbacks.profile_monitor).
 *
 * The profiler is the plan's node hook (cf_plan_set_hook) during the profiled steps: it
 * adds each node's wall time to that node's total and records a timeline event (start,
 * duration) for the Chrome trace. The trainer marks each step's start, the end of its
 * batch fetching (the data loader's share) and its end. Everything is reserved when the
 * profiler is created, for nodes x micro-batches x steps, so recording allocates nothing;
 * past CF_PROFILE_MAX_EVENTS the timeline stops growing while the totals keep counting.
 *
 * After the window, the summary gives per-op-type totals, the slowest nodes and the step's
 * phases (data loader, forward, backward, optimizer, and the rest: the step's own work
 * between nodes), each per step; it is printed as a table, written as JSON, and the
 * events as a Chrome trace. */
#ifndef CFORMERS_OBS_PROFILE_H
#define CFORMERS_OBS_PROFILE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cformers/error.h"
#include "cformers/plan.h"

#define CF_PROFILE_MAX_EVENTS (1 << 20)

typedef enum cf_profile_phase {
    CF_PROFILE_DATA, /* fetching the step's batches */
    CF_PROFILE_FORWARD,
    CF_PROFILE_BACKWARD,
    CF_PROFILE_OPTIMIZER,
    CF_PROFILE_OTHER, /* the step minus the above: work between the nodes */
    CF_PROFILE_PHASES,
} cf_profile_phase;

/* Forward, backward or optimizer: the phase a node runs in. */
cf_profile_phase cf_profile_phase_of(const cf_node *node);

typedef struct cf_profile_event {
    const cf_node *node; /* NULL for the step and data-loader spans */
    double start, seconds;
    int64_t step;
    bool whole_step; /* the step's span (node NULL) */
    int64_t comm_elems; /* > 0: a gradient bucket's all-reduce (node NULL), of this many values */
    bool compressed;    /* that all-reduce went 1-bit compressed */
} cf_profile_event;

/* Trace lanes for work on threads other than the step's. */
typedef enum cf_profile_lane {
    CF_LANE_CHECKPOINT, /* the checkpoint writer (background saves; synchronous ones too) */
    CF_LANE_LOADER,     /* a data loader worker (index: which) */
} cf_profile_lane;

/* One span of another thread; seconds < 0 while it is open. */
typedef struct cf_profile_side_span {
    cf_profile_lane lane;
    int index;
    const char *name; /* a string literal */
    double start, seconds;
} cf_profile_side_span;

typedef struct cf_profiler {
    const cf_graph *graph;
    cf_profile_event *events;
    int64_t n_events, cap_events, dropped_events;
    double *node_seconds; /* per node index, over all profiled steps */
    int64_t *node_calls;
    int64_t steps;        /* profiled so far */
    int64_t first_step;   /* the first of them */
    int64_t step;         /* the step being profiled */
    double step_start, step_seconds, data_seconds; /* totals over the profiled steps */
    cf_profile_side_span *side; /* other threads' spans (cf_profile_side_begin), under a lock */
    int64_t n_side, cap_side, dropped_side;
    uint32_t serial; /* this profiler's number, in the side spans' handles */
} cf_profiler;

/* Work on another thread (data loader worker `index`, the checkpoint writer) for the
 * trace, from a profiler's first step until it is freed (the newest such profiler
 * records; a no-op without one):
 * begin returns the handle that end takes (0: not recorded). The trace keeps the spans
 * that overlap its profiled steps; one still open then is drawn to the last step's end.
 * `name` must be a string literal. Thread-safe; allocates nothing. */
uint64_t cf_profile_side_begin(cf_profile_lane lane, int index, const char *name);
void cf_profile_side_end(uint64_t handle);
/* Copies p's side spans (cap_side of room in out) as they are now; returns how many. */
int64_t cf_profiler_side_spans(const cf_profiler *p, cf_profile_side_span *out);

/* A profiler for up to `steps` steps of `micro_batches` forward/backward passes each,
 * and `comm_spans` communication spans per step (the gradient buckets). */
cf_profiler *cf_profiler_create(const cf_graph *g, int64_t steps, int64_t micro_batches, int64_t comm_spans);
void cf_profiler_free(cf_profiler *p);

/* Around one training step (1-based `step`): begin, data_done after its batches are in,
 * end after the optimizer; the plan's hook is cf_profiler_node_done with p in between. */
void cf_profiler_step_begin(cf_profiler *p, int64_t step);
void cf_profiler_data_done(cf_profiler *p);
void cf_profiler_step_end(cf_profiler *p);
void cf_profiler_node_done(void *p, const cf_node *node, double seconds);
/* A gradient bucket's all-reduce of the step being profiled, for the trace's
 * communication lane (it ran on the communication thread, beside the ops). */
void cf_profiler_comm(cf_profiler *p, double start, double seconds, int64_t elems, bool compressed);

/* ---- The report ---- */

typedef struct cf_profile_row {
    const char *name;         /* op type, or the node's first output name (op type without one) */
    const char *op;           /* the op type */
    const cf_tensor *output;  /* a node's first output; NULL for op-type rows and nodes without */
    double calls, ms;         /* per step */
} cf_profile_row;

typedef struct cf_profile_summary {
    int64_t steps, first_step, last_step;
    double step_ms; /* mean wall time of a profiled step, batch fetching included */
    double phase_ms[CF_PROFILE_PHASES];
    cf_profile_row *ops, *nodes; /* slowest first */
    int n_ops, n_nodes;
    int64_t dropped_events;
} cf_profile_summary;

/* Totals per step of the steps profiled so far (p->steps > 0). */
void cf_profile_summarize(const cf_profiler *p, cf_profile_summary *s);
void cf_profile_summary_free(cf_profile_summary *s);

/* The table: phases, every op type, then the `top` slowest nodes. */
void cf_profile_print(const cf_profile_summary *s, int top, FILE *out);
/* The same as JSON: {"first_step", "last_step", "steps", "step_ms", "phases_ms": {...},
 * "ops": [...], "nodes": [...], "timeline_dropped_events"}. */
json_t *cf_profile_json(const cf_profile_summary *s);
/* The Chrome trace of the recorded events, written to f (cf_trace). */
void cf_profile_write_trace(const cf_profiler *p, FILE *f);

#endif
