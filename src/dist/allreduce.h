/* Internal: the all-reduce algorithms of the gradient synchronisation, run on its
 * communication thread over one bucket (a contiguous range of the gradient block,
 * reduced in place). See docs/distributed.md for what each costs in bytes per rank. */
#ifndef CFORMERS_DIST_ALLREDUCE_H
#define CFORMERS_DIST_ALLREDUCE_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/dist_internal.h"
#include "dist/grad_sync.h"
#include "dist/onebit.h"


typedef struct cf_allreduce {
    const cf_dist_group *g; /* the ranks that sum: the data-parallel group */
    bool hierarchical;     /* reduce in the node, all-reduce among leaders, broadcast */
    bool onebit;           /* compress the exchange among leaders (or all ranks) */
    double timeout;        /* seconds one bucket may take */
    /* 1-bit state, allocated once for the whole gradient block (NULL without onebit):
     * this rank's error feedback as a sender, and as the reducer of its share. */
    float *residual, *server_residual;
    unsigned char *send, *recv, *gather; /* compressed staging for the largest bucket */
    cf_onebit_kernels onebit_kernels;    /* packing for this machine's instruction set */
    int *counts;                         /* 4 x ranks of the compressed exchange's comm */
    /* ZeRO-1 (NULL otherwise): rank r owns elements [bounds[r], bounds[r + 1]) of the
     * block; each bucket is reduce-scattered, every rank keeping the sum of its part. */
    int64_t *bounds;
    float *scratch; /* this rank's part of the largest bucket */
} cf_allreduce;

/* Sets up the algorithm over group g for a gradient block of `elems` floats whose largest
 * bucket has `max_bucket` elements. Hierarchical reduces inside g's nodes first. */
int cf_allreduce_init(cf_allreduce *a, const cf_dist_group *g, bool hierarchical, bool onebit, double timeout,
                      int64_t elems, int64_t max_bucket, cf_error *err);
/* Makes cf_allreduce_bucket reduce-scatter into the shards `bounds` (ranks + 1 entries,
 * kept by the caller) instead of all-reducing. */
void cf_allreduce_shard(cf_allreduce *a, int64_t *bounds, int64_t max_bucket);
/* ZeRO-1's all-gather of the updated weights: each rank sends its shard of `params`. */
int cf_allreduce_gather(cf_allreduce *a, float *params, cf_grad_sync_stats *st, cf_error *err);
void cf_allreduce_free(cf_allreduce *a);

/* Sums buf[0 .. n) over the group's ranks in place. `offset` is buf's position in the gradient
 * block (where its error feedback lives); `compress` picks the 1-bit exchange (after the
 * warm-up). Adds what it sent to st->bytes_sent and st->raw_bytes. */
int cf_allreduce_bucket(cf_allreduce *a, float *buf, int64_t n, int64_t offset, bool compress, cf_grad_sync_stats *st,
                        cf_error *err);

/* The sparse exchange of an embedding's gradient rows. `side` is this rank's [vocab, dim]
 * gradient of the embedding lookup (zero outside the rows its tokens hit), `touched` a
 * bitmap of those rows ((vocab + 31) / 32 words). The bitmaps are OR-ed over all ranks;
 * the union's rows are packed to the front of `side`, summed over the ranks in one
 * all-reduce and added into `grad` (the parameter's [vocab, dim] gradient). `side` and
 * `touched` are left cleared for the next step; `rows` (vocab ids) is scratch. Bytes per
 * rank: 2 (W-1)/W x rows x dim x 4, against vocab x dim x 4 for the dense gradient. */
int cf_allreduce_rows(cf_allreduce *a, float *side, int64_t vocab, int64_t dim, uint32_t *touched, int32_t *rows,
                      float *grad, cf_grad_sync_stats *st, cf_error *err);

#endif
