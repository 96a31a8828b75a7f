/* `cformers train --dump-batches FILE`: every token batch the run trains and evaluates on,
 * in order, so another implementation (tools/torch_train.py) can replay exactly the same
 * data. The format is in docs/training.md ("Comparing with PyTorch"). */
#ifndef CFORMERS_TRAIN_BATCH_DUMP_H
#define CFORMERS_TRAIN_BATCH_DUMP_H

#include <stdint.h>

#include "cformers/error.h"
#include "io/atomic_file.h"

typedef enum cf_batch_kind { CF_BATCH_TRAIN = 1, CF_BATCH_EVAL = 2 } cf_batch_kind;

/* Appends one micro-batch record: kind, the step it belongs to (training: the step it
 * trains, 1-based; evaluation: the steps done), rows x cols int32 ids. */
int cf_batch_dump_write(atomic_file *f, cf_batch_kind kind, int64_t step, int64_t rows, int64_t cols,
                        const int32_t *tokens, cf_error *err);

#endif
