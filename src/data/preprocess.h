/* `cformers preprocess`: text files -> tokenized record shards (docs/record-format.md).
 *
 * Documents: in .jsonl files one per line, the string field `text_key`; in any other file
 * one per block of lines separated by blank lines (a file without blank lines is one
 * document). Each document goes to the "valid" split with probability valid_fraction,
 * decided by a hash of its index in the input (so the split is the same on every run),
 * else to "train". Documents are tokenized in parallel by the engine's thread pool; the
 * shards are written in input order, so the output is byte-identical for any worker count. */
#ifndef CFORMERS_DATA_PREPROCESS_H
#define CFORMERS_DATA_PREPROCESS_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/error.h"

typedef struct cf_preprocess_options {
    const char *const *inputs;
    int n_inputs;
    const char *tokenizer;
    const char *output_dir;
    int workers;             /* tokenizing threads (< 1: the pool's default) */
    double valid_fraction;   /* in [0, 1) */
    uint64_t split_seed;
    bool zstd;
    uint64_t shard_tokens;   /* 0: one shard per split */
    const char *text_key;    /* jsonl field, default "text" */
    bool add_bos;            /* start every document with the tokenizer's BOS id */
    bool progress;           /* progress lines on stderr */
} cf_preprocess_options;

typedef struct cf_preprocess_result {
    uint64_t bytes, documents, train_tokens, valid_tokens, train_docs, valid_docs;
    int train_shards, valid_shards;
    double seconds;
} cf_preprocess_result;

int cf_preprocess(const cf_preprocess_options *opt, cf_preprocess_result *res, cf_error *err);

#endif
