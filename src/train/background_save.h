/* Background checkpoints (callbacks.checkpoint_monitor.async_save): at a step boundary the
 * training state is copied into a staging buffer, allocated when the saver is made (its
 * pages touched by a low-priority thread meanwhile) and reused,
 * and a writer thread writes, fsyncs and renames the checkpoint while training goes on.
 * At most one write is in flight: starting a save waits for the previous one. Outcomes
 * are collected by the training thread (cf_bg_save_collect), which reports them. */
#ifndef CFORMERS_TRAIN_BACKGROUND_SAVE_H
#define CFORMERS_TRAIN_BACKGROUND_SAVE_H

#include <stdbool.h>

#include "train/train_checkpoint.h"

typedef struct cf_bg_save cf_bg_save;

/* The outcome of one background write. */
typedef struct cf_bg_result {
    char path[4096];
    int64_t step;
    bool ok;
    cf_error err;         /* why not, naming the file */
    double write_seconds; /* from the start of the write to the rename */
    cf_ckpt_write_info info; /* differential or full, bytes */
} cf_bg_result;

/* A saver for checkpoints of graph g (its structure is read by the writer thread, so it
 * must not change while the saver lives); model and tokenizer as cf_train_checkpoint_write. */
cf_bg_save *cf_bg_save_create(cf_graph *g, const cf_model_config *model, const ckpt_tok_file *tokenizer);
/* Waits for the write in flight, if any. */
void cf_bg_save_free(cf_bg_save *b);

/* Bytes of the staging buffer (0 for NULL). */
size_t cf_bg_save_staging_bytes(const cf_bg_save *b);

/* Copies `s` and `pos` to the staging buffer and starts writing them to `path`,
 * differential against `base` when given (cf_train_checkpoint_write). The previous write
 * must have been collected (cf_bg_save_collect with wait). */
void cf_bg_save_start(cf_bg_save *b, const char *path, const char *base, const cf_train_tensors *s,
                      const cf_train_position *pos);

/* Whether a finished write's outcome went to *out: with `wait`, waits for the write in
 * flight; without, only takes one that has finished. false: no write to collect. */
bool cf_bg_save_collect(cf_bg_save *b, bool wait, cf_bg_result *out);

#endif
