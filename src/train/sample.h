/* Text samples during training, from the live weights: a forward-only copy of the model
 * graph at batch 1, its parameter block refreshed from the trainer's (the same builder
 * gives the same block layout, so this is one memcpy), run over a sliding window of the
 * text so far, sampling the next token at temperature 0.8 from the trainer's RNG (which
 * checkpoints carry, so a resumed run samples the same text). */
#ifndef CFORMERS_TRAIN_SAMPLE_H
#define CFORMERS_TRAIN_SAMPLE_H

#include "cformers/train.h"

/* runner_config.sample_tokens tokens of text (malloc'd, NUL-terminated), or NULL. */
char *cf_trainer_sample_text(cf_trainer *t, cf_error *err);

#endif
