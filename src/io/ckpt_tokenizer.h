/* The tokenizer file embedded in a checkpoint (metadata "tokenizer": {"tensor": ...}). */
#ifndef CFORMERS_IO_CKPT_TOKENIZER_H
#define CFORMERS_IO_CKPT_TOKENIZER_H

#include <stdbool.h>

#include "cformers/checkpoint.h"
#include "cformers/tokenizer.h"

/* Loads it; NULL with *present = false when the checkpoint has none, NULL with
 * *present = true and err set when it is there but unreadable. */
cf_tokenizer *ckpt_load_tokenizer(cf_ckpt *c, bool *present, cf_error *err);

#endif
