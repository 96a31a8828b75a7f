/* Training: `cformers train` as a library.
 *
 * A trainer is built from a resolved cf_config: the model graph (forward, backward and the
 * AdamW update), the data loader for the train split and the held-out split, the learning
 * rate schedule, the progress display and the metrics file. cf_trainer_run() then loops
 * until runner_config.train_steps, evaluating, sampling and checkpointing on the configured
 * intervals. A checkpoint holds the whole training state (weights, both Adam moments, step,
 * RNG, data position), so a resumed run continues with bit-identical losses. */
#ifndef CFORMERS_TRAIN_H
#define CFORMERS_TRAIN_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "cformers/config.h"
#include "cformers/dist.h"
#include "cformers/error.h"
#include "cformers/model_graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- learning rate */

/* A schedule with its step counts resolved (warmup_ratio applied, total_steps filled in). */
typedef struct cf_lr_schedule {
    cf_lr_schedule_type type;
    double peak;            /* lr_schedule.learning_rate */
    double end;             /* lr_schedule.lr_end (cosine and linear decay to it) */
    int64_t warmup_steps;
    int64_t total_steps;
} cf_lr_schedule;

/* Resolves the config section; `train_steps` stands in for total_steps = 0. */
cf_lr_schedule cf_lr_schedule_resolve(const cf_lr_schedule_config *cfg, int64_t train_steps);

/* Learning rate of optimizer step `step` (0-based). Warmup is linear and counts the step
 * being taken: peak * (step + 1) / warmup_steps while step < warmup_steps, so the first
 * update is not wasted at lr 0. Afterwards, with p = (step - warmup) / (total - warmup)
 * clamped to [0, 1]: cosine end + (peak - end) * (1 + cos(pi p)) / 2, linear
 * peak - (peak - end) * p, constant peak. */
double cf_lr_schedule_at(const cf_lr_schedule *s, int64_t step);

/* ---------------------------------------------------------------- the trainer */

typedef struct cf_train_options {
    /* NULL: start fresh (or from cfg->load_checkpoint). "": the newest valid checkpoint
     * in output_dir (a corrupt newer one is passed over with a warning). Otherwise that
     * checkpoint file. Resuming restores the full state and keeps the run id; it refuses
     * a config whose model_config or seq_length differs from the checkpoint's. */
    const char *resume;
    /* With resume "": when output_dir holds no checkpoint at all, start fresh instead of
     * failing (a run restarted by `cformers launch --max-restarts` before its first save). */
    bool resume_if_any;
    /* Which restart of a supervised job this is (CFORMERS_LAUNCH_RESTART), 0 for none; in
     * the run's start record. */
    int restart;
    /* A fresh run refuses an output_dir holding checkpoints (another run's) unless this
     * is set; then it deletes them. */
    bool overwrite;
    /* train_dataset.tokenizer was named on purpose (the command line): it is used even
     * when the resumed or loaded checkpoint embeds a tokenizer, which wins otherwise. */
    bool tokenizer_given;
    /* Stop once this many optimizer steps are done (0: runner_config.train_steps). The
     * schedule still spans train_steps, so a stopped run resumes where it left off. */
    int64_t stop_after;
    FILE *out;        /* progress, reports and samples; NULL: stdout */
    bool quiet;       /* only errors: no progress, reports or samples (tests) */
    bool keep_logits; /* keep the last micro-batch's logits readable (cf_trainer_logits) */
    /* Parameters to freeze (cf_model_build_opts.freeze): no gradient, no optimizer state,
     * held in the rule's dtype; checkpoints store them in it. NULL / 0: all train. */
    const cf_freeze_rule *freeze;
    int n_freeze;
    /* For replaying the run elsewhere (tools/torch_train.py): write every training and
     * evaluation batch to this file (docs/training.md), and the weights before the first
     * step to this checkpoint. NULL: not written. */
    const char *dump_batches;
    const char *save_initial;
    /* The data-parallel group (cf_dist_open); NULL or a world of one trains alone. With
     * several ranks every rank builds the same graph and reads its own share of each
     * global batch; gradients are summed while backward runs (docs/distributed.md);
     * rank 0 alone prints, writes metrics and saves checkpoints. */
    cf_dist *dist;
    /* Called with every metrics record (one JSON object, as metrics.jsonl holds it, without
     * the time and run fields) while the run goes: how bindings see the losses live. */
    void (*on_record)(void *ctx, const char *json);
    void *record_ctx;
} cf_train_options;

typedef struct cf_trainer cf_trainer;

/* Builds the model graph with its backward and AdamW update, plans its memory, opens the
 * data (when train_dataset.data_dir is set) and the metrics file, and initialises the
 * weights from cfg->seed, cfg->load_checkpoint or the resumed checkpoint. */
cf_trainer *cf_trainer_create(const cf_config *cfg, const cf_train_options *opts, cf_error *err);
void cf_trainer_free(cf_trainer *t);

/* Trains until the stop step: evaluation, samples, checkpoints and metrics on their
 * intervals, a checkpoint at the end, then the memory report (peak RSS vs estimate).
 * While it runs, SIGTERM or SIGINT ends the run at the next step boundary with a
 * checkpoint and returns 0 (cf_trainer_stop_signal says which signal); a second one
 * takes the default action (the process dies at once). SIGUSR1 saves a checkpoint at the
 * next step boundary and training goes on. With several ranks a signal to any rank
 * acts on all of them after the same step. The previous handlers are restored after. */
int cf_trainer_run(cf_trainer *t, cf_error *err);
/* The signal (SIGTERM, SIGINT) that ended the last cf_trainer_run early, or 0. */
int cf_trainer_stop_signal(const cf_trainer *t);

/* One optimizer step on caller-supplied data: gradient_accumulation_steps micro-batches,
 * each batch_size rows of seq_length + 1 token ids, back to back. The mean loss over the
 * micro-batches goes to *loss. */
int cf_trainer_step(cf_trainer *t, const int32_t *tokens, double *loss, cf_error *err);
/* Forward and backward of one micro-batch (batch_size rows of seq_length + 1 ids) without
 * updating: the loss goes to *loss, the gradients are readable with cf_trainer_grad until
 * cf_trainer_zero_grads. Fails when a kernel meets bad data (an id past the vocabulary). */
int cf_trainer_gradients(cf_trainer *t, const int32_t *tokens, double *loss, cf_error *err);
void cf_trainer_zero_grads(cf_trainer *t);
/* Mean loss over runner_config.eval_steps batches of the held-out split (always the same
 * batches, so evaluations are comparable). */
int cf_trainer_evaluate(cf_trainer *t, double *loss, cf_error *err);
/* Writes the full training state to `path`. */
int cf_trainer_save(cf_trainer *t, const char *path, cf_error *err);

/* Optimizer steps done so far (skipped ones included). */
int64_t cf_trainer_steps_done(const cf_trainer *t);
/* The loss scale the next step uses (1 when loss scaling is off), and in *skipped (may
 * be NULL) the steps skipped so far because their gradients overflowed. */
double cf_trainer_loss_scale(const cf_trainer *t, int64_t *skipped);
/* A parameter's weights or gradient by model name (NULL when there is none), with its
 * element count in *numel. */
float *cf_trainer_param(cf_trainer *t, const char *name, int64_t *numel);
float *cf_trainer_grad(cf_trainer *t, const char *name, int64_t *numel);
/* The last gradient-flow statistics (callbacks.summary_monitor.gradient_stats_interval):
 * per parameter, in cf_graph_param_at order, the L2 norm of its gradient before clipping
 * and |weights after - before| / |weights before| of the update. Returns the step they
 * were taken at, 0 when none yet (the pointers are then NULL). */
int64_t cf_trainer_grad_stats(const cf_trainer *t, const double **grad_norm, const double **update_ratio);
/* [batch_size, seq_length, vocab_size] logits of the last micro-batch; needs keep_logits. */
const float *cf_trainer_logits(const cf_trainer *t);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
