/* The training state in a cformers checkpoint (include/cformers/checkpoint.h):
 *   - every parameter under its model name (model.layers.0.self_attn.q_proj.weight, ...),
 *     so `cformers generate` and converters read a training checkpoint like any other;
 *   - the two AdamW moment blocks as flat tensors optimizer.adam_m / optimizer.adam_v, in
 *     the parameter block's layout, and the optimizer step count optimizer.step;
 *   - metadata: model_config, the parameter layout (name, offset, elements, so a moment
 *     block is never read into a different layout), the optimizer step, the trainer's
 *     RNG state, the data loader position and the loss scaler's state. */
#ifndef CFORMERS_TRAIN_CHECKPOINT_H
#define CFORMERS_TRAIN_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/dataset.h"
#include "cformers/error.h"
#include "cformers/model_config.h"
#include "cformers/plan.h"
#include "cformers/rng.h"
#include "io/ckpt_tokenizer.h"
#include "train/loss_scale.h"

#define CF_RUN_ID_MAX 48

/* The run's settings a resume compares against the config it is given: seq_length must
 * not change; the others may, and a change is logged. Zero: not recorded (a checkpoint
 * older than these fields). */
typedef struct cf_run_settings {
    int64_t seq_length, batch_size, accumulation, ranks;
    double learning_rate;
    int64_t lora_rank; /* a LoRA run's adapters (metadata "lora", read by --lora): 0 = none */
    double lora_alpha;
    const char *lora_base;   /* the base checkpoint (load_checkpoint) and its cf_lora_base_hash; NULL = none */
    uint64_t lora_base_hash;
} cf_run_settings;

/* Everything besides tensors that a resumed run needs to continue identically. */
typedef struct cf_train_position {
    int64_t step;             /* optimizer steps done */
    cf_rng rng;               /* the trainer's generator (sampling) */
    cf_dataset_position data; /* next training batch */
    double loss;              /* loss of the last step, for the log */
    char run_id[CF_RUN_ID_MAX]; /* the run the state belongs to; "" when not recorded */
    cf_run_settings settings;
    cf_loss_scale_state loss_scale; /* kept as it is by a checkpoint that has none */
} cf_train_position;

/* How a checkpoint was written: differential or full, and its tensors' bytes on disk
 * against their size whole. */
typedef struct cf_ckpt_write_info {
    bool differential;
    uint64_t stored, raw;
} cf_ckpt_write_info;

/* Writes the plan's parameters, moments and `pos` to `path` (atomically), with the
 * tokenizer file embedded when `tokenizer` holds one (NULL or empty for none), so that
 * `cformers generate --model` needs nothing else. */
int cf_train_checkpoint_save(const char *path, cf_plan *plan, const cf_model_config *model, const ckpt_tok_file *tokenizer,
                             const cf_train_position *pos, cf_error *err);
/* The same with the Adam moments of the whole block given by the caller (a sharded
 * optimizer's moments gathered from every rank; NULL: the plan's own), differential
 * against `base` when given (as cf_train_checkpoint_write). */
int cf_train_checkpoint_save_moments(const char *path, cf_plan *plan, const float *adam_m, const float *adam_v,
                                     const cf_model_config *model, const ckpt_tok_file *tokenizer, const cf_train_position *pos,
                                     const char *base, cf_ckpt_write_info *info, cf_error *err);

/* The tensors of a training state, in the graph's flat layouts: the parameter block, both
 * moment blocks (whole, not a shard) and the optimizer step. */
typedef struct cf_train_tensors {
    const float *params, *adam_m, *adam_v;
    const int32_t *step;
} cf_train_tensors;

/* The plan's own state, with the moments given by the caller when not NULL (a sharded
 * optimizer's, gathered from every rank); -1 with err when they are needed (the
 * optimizer is sharded) and not given. */
int cf_train_tensors_of(cf_plan *plan, const float *adam_m, const float *adam_v, cf_train_tensors *s, cf_error *err);

/* Writes a training checkpoint of graph `g` (names, shapes, layout) from `s`, which need
 * not be the graph's own memory (a background save writes a copy while the graph trains
 * on); reads nothing of the graph but its structure. With `base` (a full checkpoint in
 * the same directory; NULL: none) the tensors are stored as differences against it; when
 * the base cannot be read the checkpoint is written full. `info` (may be NULL) says which. */
int cf_train_checkpoint_write(const char *path, cf_graph *g, const cf_train_tensors *s, const cf_model_config *model,
                              const ckpt_tok_file *tokenizer, const cf_train_position *pos, const char *base,
                              cf_ckpt_write_info *info, cf_error *err);

/* Reads the parameters from `path` into the plan. With `resume`, also the moments, the
 * optimizer step and *pos; the checkpoint must then hold the full training state in this
 * graph's layout. A sharded optimizer (ZeRO-1) takes its shard of the moments, so a run
 * resumes on any number of ranks. Fails naming the file and tensor on any mismatch or
 * corruption. */
int cf_train_checkpoint_load(const char *path, cf_plan *plan, bool resume, cf_train_position *pos, cf_error *err);
/* The same into graph g's tensors, bound to memory by a plan or by the caller (a
 * tensor-parallel run's whole-model graph, train_tp.c). */
int cf_train_checkpoint_load_graph(const char *path, cf_graph *g, bool resume, cf_train_position *pos, cf_error *err);
/* The same for a part of the model (a pipeline stage): the plan's parameters are some of
 * those of `whole` (the whole model's graph, unplanned: the layout the checkpoint holds),
 * whose parameters must all be stored; with `resume` each parameter's moments come from
 * its place in the whole layout. */
int cf_train_checkpoint_load_part(const char *path, cf_plan *plan, cf_graph *whole, bool resume, cf_train_position *pos,
                                  cf_error *err);

#endif
