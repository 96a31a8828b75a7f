/* Metrics as JSON lines: one object per event ({"event":"train","step":12,"loss":...}),
 * appended to a file in the run's output directory and flushed after every line, so a
 * dashboard or a script can follow a running job and a crashed run keeps what it logged. */
#ifndef CFORMERS_OBS_METRICS_H
#define CFORMERS_OBS_METRICS_H

#include <jansson.h>

#include "cformers/error.h"

typedef struct cf_metrics cf_metrics;

/* Opens `path` for appending (a resumed run continues the same file). */
cf_metrics *cf_metrics_open(const char *path, cf_error *err);
void cf_metrics_close(cf_metrics *m);

/* Writes `fields` (an object; stolen, i.e. freed here) as one line, with "event" and
 * "time" (seconds since the Unix epoch) added. m may be NULL: the fields are dropped.
 * Returns -1 with err naming the file when the line was not written; after a failed
 * write the file may end in a partial line, so every later line is dropped (and fails). */
int cf_metrics_write(cf_metrics *m, const char *event, json_t *fields, cf_error *err);

#endif
