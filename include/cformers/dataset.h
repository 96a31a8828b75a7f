/* Training data loader: fixed-length token sequences from a record directory written by
 * `cformers preprocess` (format: docs/record-format.md).
 *
 * What a batch is. The documents of a split are concatenated into one token stream, in an
 * order shuffled once per epoch from (seed, epoch), with the EOS id between documents
 * (packing). Sample i of an epoch is the window stream[i*T .. i*T+T] (T+1 tokens), so row
 * b of a batch holds the inputs tokens[b][0..T-1] and the targets tokens[b][1..T]. Global
 * batch g of an epoch is samples g*B*W .. g*B*W+B*W-1 (W = world size); rank r takes the
 * B samples starting at g*B*W + r*B, so ranks read disjoint data and together cover
 * what a single process with batch B*W would. An epoch ends before the first global
 * batch that would run past the stream (the remainder is dropped), then the next epoch
 * starts with a new shuffle.
 *
 * Prefetch. `num_workers` threads (train_dataset.num_parallel_workers) assemble batches
 * ahead of time into a bounded queue of `queue_depth` batches; batches still come out in
 * order. These are I/O-side threads, not compute threads: assembling a batch is a copy.
 *
 * Resume. cf_dataset_position() says which batch comes next; store it in the checkpoint
 * and pass it to cf_dataset_seek() (or in the options) after a restart, and the loader
 * yields exactly the batches an uninterrupted run would have. */
#ifndef CFORMERS_DATASET_H
#define CFORMERS_DATASET_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stdint.h>

#include "cformers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_dataset cf_dataset;

/* Where the loader stands: the next batch it yields is global batch `step` of epoch
 * `epoch`, with the epoch's shuffle drawn from `seed`. Plain integers, so a checkpoint can
 * store them as they are. */
typedef struct cf_dataset_position {
    uint64_t epoch;
    uint64_t step;
    uint64_t seed;
} cf_dataset_position;

typedef struct cf_dataset_options {
    const char *dir;   /* record directory written by `cformers preprocess` */
    const char *split; /* "train" or "valid" */
    int batch_size;    /* B: sequences per batch on this rank */
    int seq_len;       /* T: each sequence holds T+1 tokens (inputs + shifted targets) */
    int rank;          /* this data-parallel rank, 0 .. world_size-1 */
    int world_size;    /* number of data-parallel ranks (1 when not distributed) */
    uint64_t seed;     /* shuffle seed; epoch e uses a shuffle drawn from (seed, e) */
    bool shuffle;      /* false: documents in file order every epoch */
    int num_workers;   /* prefetch threads; 0 assembles each batch on the calling thread */
    int queue_depth;   /* batches prefetched ahead (<= 0: 2 per worker) */
    /* Optional start position (from a checkpoint); NULL starts at epoch 0, step 0. Its
     * seed must equal `seed`. */
    const cf_dataset_position *start;
} cf_dataset_options;

/* Sensible defaults: split "train", B=1, T=256, rank 0 of 1, seed 1234, shuffle on,
 * 1 worker, queue depth 0 (auto), start NULL. The caller then sets dir and sizes. */
cf_dataset_options cf_dataset_default_options(void);

/* Opens the split and checks every shard's header, index and chunk checksums. Fails
 * with a message naming the file and byte offset on a corrupt or truncated shard, and
 * when the split holds fewer tokens than one global batch needs. */
cf_dataset *cf_dataset_open(const cf_dataset_options *opt, cf_error *err);
void cf_dataset_close(cf_dataset *ds);

/* Copies the next batch into `tokens`, B rows of T+1 ids (row-major, B*(T+1) values), and
 * advances the position. Blocks while the prefetch queue is empty. */
int cf_dataset_next(cf_dataset *ds, int32_t *tokens, cf_error *err);

/* The position of the batch the next cf_dataset_next() call returns. */
cf_dataset_position cf_dataset_get_position(const cf_dataset *ds);
/* Moves to `pos` (drops anything prefetched). The seed must match the one opened with. */
int cf_dataset_seek(cf_dataset *ds, const cf_dataset_position *pos, cf_error *err);

/* Facts about the opened split. */
typedef struct cf_dataset_info {
    int vocab_size;
    int eos_id;               /* the id packed between documents */
    uint64_t tokenizer_hash;  /* cf_tokenizer_fingerprint of the tokenizer that made the shards; 0: not recorded */
    uint64_t documents;
    uint64_t tokens;          /* document tokens, without the EOS separators */
    uint64_t steps_per_epoch; /* global batches per epoch */
} cf_dataset_info;
cf_dataset_info cf_dataset_get_info(const cf_dataset *ds);

/* Loader wait counters, for training to report how long steps waited on data. */
typedef struct cf_dataset_stats {
    uint64_t batches;       /* batches handed out by cf_dataset_next */
    uint64_t tokens;        /* tokens handed out (B*(T+1) per batch) */
    double wait_seconds;    /* time cf_dataset_next spent blocked on an empty queue */
    double produce_seconds; /* time the workers spent assembling batches, all together */
} cf_dataset_stats;
cf_dataset_stats cf_dataset_get_stats(const cf_dataset *ds);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
