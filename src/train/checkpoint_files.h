/* Checkpoint files of a run in its output directory: PREFIX_stepN.ckpt, the newest one
 * (for --resume without a path) and pruning to callbacks.checkpoint_monitor's
 * keep_checkpoint_max and keep_every_n_steps. */
#ifndef CFORMERS_TRAIN_CHECKPOINT_FILES_H
#define CFORMERS_TRAIN_CHECKPOINT_FILES_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "cformers/error.h"

#include "cformers/config.h"

/* callbacks.checkpoint_monitor.prefix, or "checkpoint" when empty. */
const char *cf_checkpoint_prefix(const cf_config *cfg);

/* dir/PREFIX_stepN.ckpt into buf. */
void cf_checkpoint_file_name(char *buf, size_t size, const char *dir, const char *prefix, int64_t step);
/* The PEFT directory a LoRA run writes beside a checkpoint: PREFIX_stepN.ckpt -> PREFIX_stepN.peft. */
void cf_checkpoint_peft_dir(char *buf, size_t size, const char *checkpoint_path);

/* The checkpoint with the highest step in dir whose checksums all verify (into buf). A
 * newer one that does not (corrupt, truncated) is passed over with a one-line warning
 * on `warnings` (NULL: none). -1 with err when no checkpoint is valid. */
int cf_checkpoint_newest_valid(const char *dir, const char *prefix, char *buf, size_t size, FILE *warnings,
                               cf_error *err);

/* How many PREFIX_stepN.ckpt files dir holds (0 when it does not exist). */
size_t cf_checkpoint_count(const char *dir, const char *prefix);

/* Deletes all but the newest `keep` checkpoints and those whose step is a multiple of
 * `every` (keep <= 0: deletes nothing; every <= 0: no step is kept for being one); the
 * base of a kept differential checkpoint is kept too. */
void cf_checkpoint_prune(const char *dir, const char *prefix, int64_t keep, int64_t every);

/* Deletes every checkpoint of dir (--overwrite: a new run replaces the old one). */
void cf_checkpoint_remove_all(const char *dir, const char *prefix);


#include "core/file_util.h" /* cf_make_dirs */

#endif
