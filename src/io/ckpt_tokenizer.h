/* The tokenizer file embedded in a checkpoint (metadata "tokenizer": {"tensor": ...}). */
#ifndef CFORMERS_IO_CKPT_TOKENIZER_H
#define CFORMERS_IO_CKPT_TOKENIZER_H

#include <jansson.h>
#include <stdbool.h>

#include "cformers/checkpoint.h"
#include "cformers/tokenizer.h"

/* Loads it; NULL with *present = false when the checkpoint has none, NULL with
 * *present = true and err set when it is there but unreadable. */
cf_tokenizer *ckpt_load_tokenizer(cf_ckpt *c, bool *present, cf_error *err);

/* Checks that `path` loads as a tokenizer, writes its bytes as a tensor and records it
 * in `meta`, so the checkpoint alone is enough to generate. A tokenizer that is a
 * directory (GPT-2's encoder.json + vocab.bpe) is checked but not embedded. */
int ckpt_embed_tokenizer(cf_ckpt_writer *w, const char *path, json_t *meta, cf_error *err);

#endif
