#include "obs/trace.h"

#include <math.h>

/* Microseconds, rounded to the nanosecond so the text stays short. */
static double micros(double seconds) { return round(seconds * 1e9) / 1e3; }

/* event is NULL only when a name is not UTF-8, which JSON cannot carry: skipped. */
static void write_event(cf_trace *t, json_t *event) {
    if (!event) return;
    fputs(t->events++ ? ",\n" : "\n", t->f);
    json_dumpf(event, t->f, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    json_decref(event);
}

void cf_trace_begin(cf_trace *t, FILE *f, double origin, const char *process) {
    *t = (cf_trace){.f = f, .origin = origin};
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[", f);
    write_event(t, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid", 1, "tid", 0,
                             "args", "name", process));
}

void cf_trace_lane(cf_trace *t, int lane, const char *name) {
    write_event(t, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1, "tid",
                             lane, "args", "name", name));
    write_event(t, json_pack("{s:s, s:s, s:i, s:i, s:{s:i}}", "name", "thread_sort_index", "ph", "M", "pid", 1,
                             "tid", lane, "args", "sort_index", lane));
}

void cf_trace_span(cf_trace *t, int lane, const char *name, const char *cat, double start, double seconds,
                   json_t *args) {
    json_t *event = json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i}", "name", name, "cat", cat, "ph", "X", "ts",
                              micros(start - t->origin), "dur", micros(seconds), "pid", 1, "tid", lane);
    if (event && args) json_object_set_new(event, "args", args);
    else json_decref(args);
    write_event(t, event);
}

void cf_trace_end(cf_trace *t) { fputs("\n]}\n", t->f); }
