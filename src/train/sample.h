/* Text samples during training, from the live weights, without a file round trip:
 *   - LLaMA: the inference model (cformers/infer.h) over the trainer's parameters in
 *     place, with its KV cache, one token at a time;
 *   - GPT-2 (which the inference model does not cover): a forward-only copy of the model
 *     graph at batch 1, its parameter block refreshed from the trainer's with one memcpy
 *     (the same builder gives the same layout), run over a sliding window of the text.
 * Tokens are drawn at temperature 0.8 with a seed taken from the trainer's RNG, which
 * checkpoints carry, so a resumed run samples the same text. */
#ifndef CFORMERS_TRAIN_SAMPLE_H
#define CFORMERS_TRAIN_SAMPLE_H

#include "cformers/train.h"

/* runner_config.sample_tokens tokens of text (malloc'd, valid UTF-8), or NULL. */
char *cf_trainer_sample_text(cf_trainer *t, cf_error *err);

#endif
