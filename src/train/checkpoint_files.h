/* Checkpoint files of a run in its output directory: PREFIX_stepN.ckpt, the newest one
 * (for --resume without a path) and pruning to callbacks.checkpoint_monitor's
 * keep_checkpoint_max. */
#ifndef CFORMERS_TRAIN_CHECKPOINT_FILES_H
#define CFORMERS_TRAIN_CHECKPOINT_FILES_H

#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"

#include "cformers/config.h"

/* callbacks.checkpoint_monitor.prefix, or "checkpoint" when empty. */
const char *cf_checkpoint_prefix(const cf_config *cfg);

/* dir/PREFIX_stepN.ckpt into buf. */
void cf_checkpoint_file_name(char *buf, size_t size, const char *dir, const char *prefix, int64_t step);

/* The checkpoint with the highest step in dir (into buf); -1 with err when there is none. */
int cf_checkpoint_newest(const char *dir, const char *prefix, char *buf, size_t size, cf_error *err);

/* Deletes all but the newest `keep` checkpoints (keep <= 0: deletes nothing). */
void cf_checkpoint_prune(const char *dir, const char *prefix, int64_t keep);


#include "core/file_util.h" /* cf_make_dirs */

#endif
