/* Loss scaling (config section loss_scale; docs/precision.md): the trainer multiplies the
 * loss by the scale before backward, the update divides the gradients by it, and a step
 * whose gradients overflowed is skipped by the update (weights and moments untouched).
 * This file holds the scale's rule between steps, as PyTorch's GradScaler: dynamic
 * scaling divides the scale by scale_factor after an overflow and multiplies it by
 * scale_factor after scale_window clean steps in a row. */
#ifndef CFORMERS_LOSS_SCALE_H
#define CFORMERS_LOSS_SCALE_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/config.h"

/* The scaler's state; a training checkpoint stores it so a resumed run goes on with it. */
typedef struct cf_loss_scale_state {
    double scale;          /* the loss is multiplied by this (1 when scaling is off) */
    int64_t good_steps;    /* clean steps since the scale last changed (dynamic) */
    int64_t skipped_steps; /* steps skipped for an inf/NaN gradient in the whole run */
} cf_loss_scale_state;

/* loss_scale.type with auto resolved against compute_dtype (dynamic for f16, else none). */
cf_loss_scale_type cf_loss_scale_mode(const cf_config *cfg);

/* The state at the start of a run. */
cf_loss_scale_state cf_loss_scale_start(const cf_config *cfg);

/* After a step whose gradient norm was `grad_norm`: counts the step clean or skipped and
 * moves the scale (dynamic only; never below the smallest normal f32 nor above
 * 2^127). Returns true when the step was skipped (a non-finite norm). */
bool cf_loss_scale_after_step(cf_loss_scale_state *s, const cf_config *cfg, double grad_norm);

#endif
