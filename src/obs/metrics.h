/* Metrics as JSON lines: one object per event ({"event":"train","step":12,"loss":...}),
 * appended to a file in the run's output directory and flushed after every line, so a
 * dashboard or a script can follow a running job and a crashed run keeps what it logged. */
#ifndef CFORMERS_OBS_METRICS_H
#define CFORMERS_OBS_METRICS_H

#include <jansson.h>

#include "cformers/error.h"

typedef struct cf_metrics cf_metrics;

/* Opens `path` for appending (a resumed run continues the same file); NULL: no JSON file
 * (the events may still go to TensorBoard). */
cf_metrics *cf_metrics_open(const char *path, cf_error *err);
void cf_metrics_close(cf_metrics *m);

/* From now on every number of every event is also a TensorBoard scalar "<event>/<field>"
 * (train/loss, eval/val_loss, ...) at the event's "step" (the last step seen for events
 * without one) in a new event file in `dir`, which must exist. */
int cf_metrics_add_tensorboard(cf_metrics *m, const char *dir, cf_error *err);

/* From now on every line carries "run": id (after "event" and "time"). */
void cf_metrics_set_run(cf_metrics *m, const char *id);

/* Writes `fields` (an object; stolen, i.e. freed here) as one line, with "event" and
 * "time" (seconds since the Unix epoch) added. m may be NULL: the fields are dropped.
 * Returns -1 with err naming the file when the line was not written; after a failed
 * write the file may end in a partial line, so every later line is dropped (and fails). */
int cf_metrics_write(cf_metrics *m, const char *event, json_t *fields, cf_error *err);

#endif
