/* Byte-level BPE training (`cformers tokenizer train`): GPT-2 pre-tokenisation, word
 * counts gathered in parallel, then merges chosen greedily by pair count with
 * incrementally maintained counts and a max-heap. Ties go to the smaller (left, right)
 * id pair, and counts are exact sums, so the result does not depend on the thread count.
 * The output is a Hugging Face tokenizer.json (ByteLevel, BPE) that cf_tokenizer_load reads. */
#ifndef CFORMERS_DATA_BPE_TRAIN_H
#define CFORMERS_DATA_BPE_TRAIN_H

#include <stdbool.h>

#include "cformers/error.h"

typedef struct cf_bpe_train_options {
    const char *const *inputs;
    int n_inputs;
    int vocab_size; /* 256 bytes + merges + one <|endoftext|> token */
    const char *output;
    int threads;    /* < 1: the pool's default */
    bool progress;
} cf_bpe_train_options;

/* Returns the vocabulary size reached (smaller than asked when the corpus runs out of
 * pairs seen at least twice), or -1 on failure. */
int cf_bpe_train(const cf_bpe_train_options *opt, cf_error *err);

#endif
