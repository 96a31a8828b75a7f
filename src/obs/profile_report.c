/* The profile's report: totals per step by phase, op type and node, printed as a table,
 * as JSON, and the recorded events as a Chrome trace. */
#include <stdlib.h>
#include <string.h>

#include "obs/profile.h"
#include "obs/trace.h"

static const char *const phase_names[CF_PROFILE_PHASES] = {"data loader", "forward", "backward", "optimizer",
                                                           "other"};
static const char *const phase_keys[CF_PROFILE_PHASES] = {"data_loader", "forward", "backward", "optimizer",
                                                          "other"};

static int slowest_first(const void *a, const void *b) {
    double x = ((const cf_profile_row *)a)->ms, y = ((const cf_profile_row *)b)->ms;
    return (x < y) - (x > y);
}

/* A node's first output, NULL for nodes that only update in place (the optimizer). */
static const cf_tensor *node_output(const cf_node *node) { return node->n_outputs > 0 ? node->outputs[0] : NULL; }

static void add_to_op(cf_profile_summary *s, const cf_profile_row *node) {
    int i = 0;
    while (i < s->n_ops && strcmp(s->ops[i].op, node->op) != 0) i++;
    if (i == s->n_ops) s->ops[s->n_ops++] = (cf_profile_row){.name = node->op, .op = node->op};
    s->ops[i].calls += node->calls;
    s->ops[i].ms += node->ms;
}

void cf_profile_summarize(const cf_profiler *p, cf_profile_summary *s) {
    int n = cf_graph_num_nodes(p->graph);
    double per_step_ms = 1e3 / (double)p->steps;
    *s = (cf_profile_summary){.steps = p->steps, .first_step = p->first_step, .last_step = p->step,
                              .step_ms = p->step_seconds * per_step_ms, .dropped_events = p->dropped_events,
                              .ops = cf_xcalloc((size_t)n, sizeof *s->ops),
                              .nodes = cf_xcalloc((size_t)n, sizeof *s->nodes)};
    s->phase_ms[CF_PROFILE_DATA] = p->data_seconds * per_step_ms;
    for (int i = 0; i < n; i++) {
        if (p->node_calls[i] == 0) continue;
        const cf_node *node = cf_graph_node(p->graph, i);
        cf_profile_row *row = &s->nodes[s->n_nodes++];
        const cf_tensor *out = node_output(node);
        *row = (cf_profile_row){.name = out ? out->name : node->op->name, .op = node->op->name, .output = out,
                                .calls = (double)p->node_calls[i] / (double)p->steps,
                                .ms = p->node_seconds[i] * per_step_ms};
        s->phase_ms[cf_profile_phase_of(node)] += row->ms;
        add_to_op(s, row);
    }
    double tracked = 0.0;
    for (int k = 0; k < CF_PROFILE_OTHER; k++) tracked += s->phase_ms[k];
    s->phase_ms[CF_PROFILE_OTHER] = s->step_ms - tracked;
    qsort(s->ops, (size_t)s->n_ops, sizeof *s->ops, slowest_first);
    qsort(s->nodes, (size_t)s->n_nodes, sizeof *s->nodes, slowest_first);
}

void cf_profile_summary_free(cf_profile_summary *s) {
    free(s->ops);
    free(s->nodes);
    *s = (cf_profile_summary){0};
}

static void format_shape(const cf_tensor *t, char *buf, size_t size) {
    if (!t) {
        snprintf(buf, size, "-");
        return;
    }
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < t->ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

static double percent(const cf_profile_summary *s, double ms) { return s->step_ms > 0 ? 100.0 * ms / s->step_ms : 0; }

/* The name column fits the longest name printed. */
static int name_width(const cf_profile_summary *s, int top) {
    size_t w = strlen("slowest nodes (first output)");
    for (int i = 0; i < s->n_ops; i++) w = strlen(s->ops[i].op) > w ? strlen(s->ops[i].op) : w;
    for (int i = 0; i < s->n_nodes && i < top; i++) w = strlen(s->nodes[i].name) > w ? strlen(s->nodes[i].name) : w;
    return (int)w;
}

void cf_profile_print(const cf_profile_summary *s, int top, FILE *out) {
    int w = name_width(s, top);
    fprintf(out, "profile of steps %lld-%lld: %.3f ms per step (mean of %lld)\n", (long long)s->first_step,
            (long long)s->last_step, s->step_ms, (long long)s->steps);
    fprintf(out, "  %-*s %10s %9s\n", w, "phase", "ms/step", "% of step");
    for (int k = 0; k < CF_PROFILE_PHASES; k++)
        fprintf(out, "  %-*s %10.3f %8.1f%%\n", w, phase_names[k], s->phase_ms[k], percent(s, s->phase_ms[k]));
    fprintf(out, "  %-*s %10s %9s %10s\n", w, "op", "ms/step", "% of step", "calls/step");
    for (int i = 0; i < s->n_ops; i++)
        fprintf(out, "  %-*s %10.3f %8.1f%% %10.0f\n", w, s->ops[i].op, s->ops[i].ms, percent(s, s->ops[i].ms),
                s->ops[i].calls);
    fprintf(out, "  %-*s %10s %9s  %-24s %s\n", w, "slowest nodes (first output)", "ms/step", "% of step", "op",
            "output shape");
    for (int i = 0; i < s->n_nodes && i < top; i++) {
        char shape[96];
        format_shape(s->nodes[i].output, shape, sizeof shape);
        fprintf(out, "  %-*s %10.3f %8.1f%%  %-24s %s\n", w, s->nodes[i].name, s->nodes[i].ms,
                percent(s, s->nodes[i].ms), s->nodes[i].op, shape);
    }
    if (s->dropped_events > 0)
        fprintf(out, "  (the timeline was full: it lacks the last %lld events)\n", (long long)s->dropped_events);
}

static json_t *json_shape(const cf_tensor *t) {
    json_t *shape = json_array();
    for (int d = 0; d < t->ndim; d++) json_array_append_new(shape, json_integer(t->shape[d]));
    return shape;
}

static json_t *json_shape_or_null(const cf_tensor *t) { return t ? json_shape(t) : json_null(); }

static json_t *json_row(const cf_profile_summary *s, const cf_profile_row *r, bool node) {
    json_t *row = node ? json_pack("{s:s, s:s, s:o}", "name", r->name, "op", r->op, "shape",
                                   json_shape_or_null(r->output))
                       : json_pack("{s:s}", "op", r->op);
    json_object_update_new(row, json_pack("{s:f, s:f, s:f}", "calls_per_step", r->calls, "ms_per_step", r->ms,
                                          "percent", percent(s, r->ms)));
    return row;
}

json_t *cf_profile_json(const cf_profile_summary *s) {
    json_t *phases = json_object(), *ops = json_array(), *nodes = json_array();
    for (int k = 0; k < CF_PROFILE_PHASES; k++) json_object_set_new(phases, phase_keys[k], json_real(s->phase_ms[k]));
    for (int i = 0; i < s->n_ops; i++) json_array_append_new(ops, json_row(s, &s->ops[i], false));
    for (int i = 0; i < s->n_nodes; i++) json_array_append_new(nodes, json_row(s, &s->nodes[i], true));
    return json_pack("{s:I, s:I, s:I, s:f, s:o, s:o, s:o, s:I}", "first_step", (json_int_t)s->first_step,
                     "last_step", (json_int_t)s->last_step, "steps", (json_int_t)s->steps, "step_ms", s->step_ms,
                     "phases_ms", phases, "ops", ops, "nodes", nodes, "timeline_dropped_events",
                     (json_int_t)s->dropped_events);
}

/* Trace lanes: the steps on top, then one per phase, then the communication thread, the
 * checkpoint writer and the data loader's workers. */
#define STEP_LANE 1
#define COMM_LANE (STEP_LANE + 1 + CF_PROFILE_OTHER)
#define WRITER_LANE (COMM_LANE + 1)
#define LOADER_LANE (WRITER_LANE + 1) /* + the worker's index */
static int lane_of(const cf_profile_event *e) {
    if (e->whole_step) return STEP_LANE;
    if (e->comm_elems) return COMM_LANE;
    return STEP_LANE + 1 + (int)(e->node ? cf_profile_phase_of(e->node) : CF_PROFILE_DATA);
}

static void write_event(cf_trace *t, const cf_profile_event *e) {
    char name[32];
    if (e->node) {
        const cf_tensor *out = node_output(e->node);
        cf_trace_span(t, lane_of(e), out ? out->name : e->node->op->name, "op", e->start, e->seconds,
                      json_pack("{s:s, s:o, s:I}", "op", e->node->op->name, "shape", json_shape_or_null(out),
                                "step", (json_int_t)e->step));
    } else if (e->comm_elems) {
        cf_trace_span(t, COMM_LANE, e->compressed ? "all-reduce (1-bit)" : "all-reduce", "comm", e->start, e->seconds,
                      json_pack("{s:I, s:f, s:I}", "values", (json_int_t)e->comm_elems, "MiB",
                                (double)e->comm_elems * 4.0 / (1024.0 * 1024.0), "step", (json_int_t)e->step));
    } else if (e->whole_step) {
        snprintf(name, sizeof name, "step %lld", (long long)e->step);
        cf_trace_span(t, lane_of(e), name, "step", e->start, e->seconds, NULL);
    } else {
        cf_trace_span(t, lane_of(e), "fetch batches", "data", e->start, e->seconds,
                      json_pack("{s:I}", "step", (json_int_t)e->step));
    }
}

/* The other threads' spans that overlap [from, to] (the profiled steps), clipped to it;
 * each lane is named before its first span. */
static void write_side_spans(cf_trace *t, const cf_profiler *p, double from, double to) {
    enum { MAX_WORKERS = 64 };
    bool named[MAX_WORKERS + 1] = {false};
    cf_profile_side_span *side = cf_xmalloc(sizeof *side * (size_t)(p->cap_side ? p->cap_side : 1));
    int64_t n = cf_profiler_side_spans(p, side);
    for (int64_t i = 0; i < n; i++) {
        const cf_profile_side_span *s = &side[i];
        bool open = s->seconds < 0;
        double start = s->start > from ? s->start : from, end = open ? to : s->start + s->seconds;
        if (end > to) end = to;
        if (end < start || s->index < 0 || s->index >= MAX_WORKERS) continue;
        int which = s->lane == CF_LANE_CHECKPOINT ? 0 : 1 + s->index;
        int lane = s->lane == CF_LANE_CHECKPOINT ? WRITER_LANE : LOADER_LANE + s->index;
        if (!named[which]) {
            char name[48];
            if (s->lane == CF_LANE_CHECKPOINT) snprintf(name, sizeof name, "checkpoint writer");
            else snprintf(name, sizeof name, "data loader worker %d", s->index);
            cf_trace_lane(t, lane, name);
            named[which] = true;
        }
        cf_trace_span(t, lane, s->name, s->lane == CF_LANE_CHECKPOINT ? "checkpoint" : "data", start, end - start,
                      open ? json_pack("{s:b}", "in_flight", true) : NULL);
    }
    free(side);
}

void cf_profile_write_trace(const cf_profiler *p, FILE *f) {
    double origin = p->n_events ? p->events[0].start : 0.0, to = origin;
    for (int64_t i = 1; i < p->n_events; i++)
        if (p->events[i].start < origin) origin = p->events[i].start;
    for (int64_t i = 0; i < p->n_events; i++)
        if (p->events[i].whole_step && p->events[i].start + p->events[i].seconds > to)
            to = p->events[i].start + p->events[i].seconds;
    cf_trace t;
    cf_trace_begin(&t, f, origin, "cformers train");
    cf_trace_lane(&t, STEP_LANE, "step");
    for (int k = 0; k < CF_PROFILE_OTHER; k++) cf_trace_lane(&t, STEP_LANE + 1 + k, phase_names[k]);
    cf_trace_lane(&t, COMM_LANE, "communication");
    for (int64_t i = 0; i < p->n_events; i++) write_event(&t, &p->events[i]);
    write_side_spans(&t, p, origin, to);
    cf_trace_end(&t);
}
