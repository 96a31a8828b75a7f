/* Where the trainer's batches come from: one interface over two sources.
 *   - a record directory written by `cformers preprocess` (cformers/dataset.h), with its
 *     "train" and "valid" splits;
 *   - a plain text file (train_dataset.data_dir ending in .txt), read as bytes (the byte
 *     vocabulary, which needs vocab_size >= 256) or encoded with the run's tokenizer: the
 *     last eval_split of the file is the "valid" split, and batch k of a split holds B
 *     windows of T+1 tokens at offsets drawn from stream k of the seed, so the position is
 *     just k and resuming is exact.
 * Batches are B rows of T+1 ids (inputs, then targets shifted by one). */
#ifndef CFORMERS_TRAIN_BATCHES_H
#define CFORMERS_TRAIN_BATCHES_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/config.h"
#include "cformers/dataset.h"
#include "cformers/error.h"
#include "cformers/tokenizer.h"

typedef struct cf_batches cf_batches;

/* True when data_dir names a text file rather than a record directory. */
bool cf_batches_is_text(const char *data_dir);

/* Opens `split` ("train" or "valid") of cfg->train_dataset with `batch` rows of the
 * runner's sequence length per batch, as rank `rank` of `world` data-parallel ranks. A
 * text file is encoded with `tok`, or read as bytes when it is NULL. */
cf_batches *cf_batches_open(const cf_config *cfg, const char *split, int64_t batch, int rank, int world,
                            const cf_tokenizer *tok, cf_error *err);
void cf_batches_close(cf_batches *b);
/* The record split's facts (vocabulary, EOS, tokenizer fingerprint); false for a text file. */
bool cf_batches_records_info(const cf_batches *b, cf_dataset_info *out);

int cf_batches_next(cf_batches *b, int32_t *tokens, cf_error *err);
cf_dataset_position cf_batches_position(const cf_batches *b);
/* Batches in one pass over the split (a record split's steps_per_epoch; a text split's
 * length over the tokens one global batch reads). */
int64_t cf_batches_per_epoch(const cf_batches *b);
int cf_batches_seek(cf_batches *b, const cf_dataset_position *pos, cf_error *err);
/* Seconds cf_batches_next spent waiting for data (prefetch misses). */
double cf_batches_wait_seconds(const cf_batches *b);

#endif
