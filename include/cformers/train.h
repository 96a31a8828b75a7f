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

#include <stdbool.h>
#include <stdint.h>

#include "cformers/config.h"
#include "cformers/error.h"

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

#ifdef __cplusplus
}
#endif
#endif
