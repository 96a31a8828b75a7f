/* Heartbeats for `cformers launch`'s supervisor: when CFORMERS_HEARTBEAT_DIR is set (the
 * launcher sets it), every rank rewrites DIR/rank<R> (its step, one line) after each
 * training step, and the launcher takes a file that stops changing for longer than its
 * --heartbeat-timeout as a hung rank. Off (no file I/O) otherwise. */
#ifndef CFORMERS_TRAIN_HEARTBEAT_H
#define CFORMERS_TRAIN_HEARTBEAT_H

#include <stdint.h>

/* Rewrites this rank's heartbeat file; errors are ignored (a missed beat is what the
 * supervisor watches for, not a reason to stop training). */
void cf_heartbeat(int rank, int64_t step);

#endif
