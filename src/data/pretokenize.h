/* Byte-level BPE pre-tokenisation, written out by hand instead of with a regex engine.
 * Malformed UTF-8 bytes count as one "other" character each.
 *
 * GPT-2:   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * LLaMA-3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *          ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
#ifndef CFORMERS_DATA_PRETOKENIZE_H
#define CFORMERS_DATA_PRETOKENIZE_H

#include <stddef.h>

/* Length in bytes of the pre-token that starts at text[i] (i < len); always >= 1. */
size_t cf_gpt2_pretoken(const char *text, size_t len, size_t i);
size_t cf_llama3_pretoken(const char *text, size_t len, size_t i);

typedef size_t (*cf_pretoken_fn)(const char *text, size_t len, size_t i);

/* The patterns as tokenizer.json spells them, to recognise them there. */
extern const char CF_GPT2_PATTERN[];
extern const char CF_LLAMA3_PATTERN[];

#endif
