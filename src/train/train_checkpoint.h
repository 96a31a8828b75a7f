/* The training state in a cformers checkpoint (include/cformers/checkpoint.h):
 *   - every parameter under its model name (model.layers.0.self_attn.q_proj.weight, ...),
 *     so `cformers generate` and converters read a training checkpoint like any other;
 *   - the two AdamW moment blocks as flat tensors optimizer.adam_m / optimizer.adam_v, in
 *     the parameter block's layout, and the optimizer step count optimizer.step;
 *   - metadata: model_config, the parameter layout (name, offset, elements, so a moment
 *     block is never read into a different layout), the optimizer step, the trainer's
 *     RNG state and the data loader position. */
#ifndef CFORMERS_TRAIN_CHECKPOINT_H
#define CFORMERS_TRAIN_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/dataset.h"
#include "cformers/error.h"
#include "cformers/model_config.h"
#include "cformers/plan.h"
#include "cformers/rng.h"

/* Everything besides tensors that a resumed run needs to continue identically. */
typedef struct cf_train_position {
    int64_t step;             /* optimizer steps done */
    cf_rng rng;               /* the trainer's generator (sampling) */
    cf_dataset_position data; /* next training batch */
    double loss;              /* loss of the last step, for the log */
} cf_train_position;

/* Writes the plan's parameters, moments and `pos` to `path` (atomically), with the
 * tokenizer file embedded when `tokenizer` names one (NULL or "" for none), so that
 * `cformers generate --model` needs nothing else. */
int cf_train_checkpoint_save(const char *path, cf_plan *plan, const cf_model_config *model, const char *tokenizer,
                             const cf_train_position *pos, cf_error *err);
/* The same with the Adam moments of the whole block given by the caller (a sharded
 * optimizer's moments gathered from every rank); NULL: the plan's own. */
int cf_train_checkpoint_save_moments(const char *path, cf_plan *plan, const float *adam_m, const float *adam_v,
                                     const cf_model_config *model, const char *tokenizer, const cf_train_position *pos,
                                     cf_error *err);

/* Reads the parameters from `path` into the plan. With `resume`, also the moments, the
 * optimizer step and *pos; the checkpoint must then hold the full training state in this
 * graph's layout. A sharded optimizer (ZeRO-1) takes its shard of the moments, so a run
 * resumes on any number of ranks. Fails naming the file and tensor on any mismatch or
 * corruption. */
int cf_train_checkpoint_load(const char *path, cf_plan *plan, bool resume, cf_train_position *pos, cf_error *err);

#endif
