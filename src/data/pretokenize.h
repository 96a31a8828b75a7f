/* GPT-2 pre-tokenisation, written out by hand instead of with a regex engine:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * Malformed UTF-8 bytes count as one "other" character each. */
#ifndef CFORMERS_DATA_PRETOKENIZE_H
#define CFORMERS_DATA_PRETOKENIZE_H

#include <stddef.h>

/* Length in bytes of the pre-token that starts at text[i] (i < len); always >= 1. */
size_t cf_gpt2_pretoken(const char *text, size_t len, size_t i);

#endif
