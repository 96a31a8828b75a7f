/* Runs in an output directory: every run has an id (in its checkpoints' metadata and its
 * metrics records); a fresh run does not start over another run's checkpoints unless told
 * to (--overwrite); --resume takes the newest valid checkpoint and keeps the model's and
 * the data's shape, while the batch size, accumulation, ranks and learning rate may
 * change (the changes are logged). */
#ifndef CFORMERS_TRAIN_RUN_DIR_H
#define CFORMERS_TRAIN_RUN_DIR_H

#include <jansson.h>

#include "train/trainer_internal.h"

/* Picks the checkpoint to resume from into t->resumed_from ("" for a fresh run):
 * opts.resume, load_checkpoint with resume_training set, or the newest valid one of
 * output_dir when opts.resume is "". Before the tokenizer is chosen: a resume keeps the
 * checkpoint's. */
int cf_run_dir_find_resume(cf_trainer *t, cf_error *err);

/* Refuses a t->resumed_from whose model_config or seq_length differs from the config
 * (naming the key) and loads it. Either way t->pos gets the run id and settings. */
int cf_run_dir_begin(cf_trainer *t, cf_error *err);

/* Before a run writes to output_dir (rank 0): a fresh run refuses a directory holding
 * checkpoints (another run's), or with opts.overwrite deletes them. A trainer that is
 * only stepped (tests, benchmarks) never claims the directory. */
int cf_run_dir_claim(const cf_trainer *t, cf_error *err);

/* The run's "start" metrics record: run id, step, whether and from where it resumed, and
 * the settings the resume changed (also printed). */
json_t *cf_run_dir_start_record(const cf_trainer *t);

#endif
