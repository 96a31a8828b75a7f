/* The tokenizer of a Hugging Face model directory, both ways. */
#ifndef CFORMERS_IO_HF_TOKENIZER_H
#define CFORMERS_IO_HF_TOKENIZER_H

#include <stddef.h>

#include "cformers/checkpoint.h"
#include "cformers/error.h"

/* Writes the checkpoint's embedded tokenizer into out_dir in the form transformers'
 * AutoTokenizer loads: SentencePiece as tokenizer.model (a llama2.c tokenizer.bin is
 * rewritten as one), byte-level BPE as tokenizer.json; then tokenizer_config.json and
 * special_tokens_map.json naming the special tokens. Nothing without an embedded one. */
int cf_hf_export_tokenizer(cf_ckpt *c, int64_t max_length, const char *out_dir, cf_error *err);

/* The tokenizer file of a model directory that cformers loads: DIR/tokenizer.model, else
 * DIR/tokenizer.json when it loads (one with a normaliser, as LLaMA 2's fast tokenizer
 * has next to its tokenizer.model, does not); into buf, or NULL when there is none. */
const char *cf_hf_import_tokenizer_file(const char *dir, char *buf, size_t cap);

#endif
