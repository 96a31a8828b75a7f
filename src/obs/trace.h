/* Chrome trace writer: the JSON "traceEvents" format that chrome://tracing and Perfetto
 * (ui.perfetto.dev) open. Spans are complete events ("ph":"X") with microsecond start and
 * duration, each on a lane (a "thread" row of the viewer) named once with cf_trace_lane.
 * Events are written as they come, so a large trace never sits in memory as a tree. */
#ifndef CFORMERS_OBS_TRACE_H
#define CFORMERS_OBS_TRACE_H

#include <jansson.h>
#include <stdio.h>

typedef struct cf_trace {
    FILE *f;
    double origin; /* seconds (cf_clock_seconds) shown as time 0 */
    long events;   /* written so far, metadata included */
} cf_trace;

/* Starts the document in f; `process` names the process row. */
void cf_trace_begin(cf_trace *t, FILE *f, double origin, const char *process);
/* Names lane `lane` and keeps the lanes in the viewer in their numeric order. */
void cf_trace_lane(cf_trace *t, int lane, const char *name);
/* One span of `seconds` from `start` (both cf_clock_seconds units). args: an object of
 * extra fields shown on selection, stolen (freed here); may be NULL. */
void cf_trace_span(cf_trace *t, int lane, const char *name, const char *cat, double start, double seconds,
                   json_t *args);
/* Ends the document. Write errors are left to the caller (ferror on the FILE). */
void cf_trace_end(cf_trace *t);

#endif
