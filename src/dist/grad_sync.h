/* Data-parallel gradient synchronisation: a graph pass and the communication thread.
 *
 * The pass (cf_grad_sync_create, after the backward and the AdamW update are built and
 * before the plan) groups the gradient block into buckets in the order backward
 * finishes them and inserts, after each bucket's last writer, a `grad_sync_start` node
 * that hands the bucket to this rank's communication thread; one `grad_sync_wait` node
 * before the update (the global gradient norm) waits for all of them. Backward goes on
 * while the thread all-reduces, so the communication hides behind the compute of the
 * earlier layers. Buckets are contiguous ranges of the gradient block, reduced in place:
 * nothing is copied or allocated per step.
 *
 * The ranks are those of the data-parallel group (cf_dist_group_of(d, CF_GROUP_DATA)):
 * every rank with this rank's tensor rank and pipeline stage; with model_parallel =
 * pipeline_stage = 1 that is the world, on the world's own communicators.
 *
 * The reduction is a sum (the loss is scaled by 1 / (ranks x accumulation steps), so the
 * sum is the mean gradient of the global batch) by one of the algorithms in allreduce.c:
 * MPI's MPI_Iallreduce; hierarchical (reduce inside the node, all-reduce among node
 * leaders, broadcast inside the node); 1-bit sign compression with error feedback after
 * parallel_config.freeze_step uncompressed steps (alone, or between node leaders in the
 * hierarchical scheme). Every algorithm reduces in a fixed order, so a rerun on the same
 * world size is bit-identical. */
#ifndef CFORMERS_DIST_GRAD_SYNC_H
#define CFORMERS_DIST_GRAD_SYNC_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/config.h"
#include "cformers/dist.h"
#include "cformers/graph.h"

typedef struct cf_grad_sync cf_grad_sync;

enum { CF_GRAD_SYNC_MAX_BUCKETS = 4096 };

/* What the last synchronised step cost on this rank. */
typedef struct cf_grad_sync_stats {
    int buckets;
    int compressed_buckets;   /* of them, sent 1-bit compressed */
    double comm_seconds;      /* sum over buckets of start-of-work to done on the thread */
    double wait_seconds;      /* the update waited this long for the last buckets */
    double bytes_sent;        /* bytes this rank handed to MPI for other ranks (model of the algorithm) */
    double raw_bytes;         /* what the same buckets cost uncompressed */
    double rows_bytes;        /* of bytes_sent, the embeddings' sparse rows (never compressed) */
    double first_start, last_done; /* cf_clock_seconds of the first hand-over and the last completion */
} cf_grad_sync_stats;

/* One bucket's all-reduce in the last step, for the timeline's communication lane. */
typedef struct cf_grad_sync_span {
    double start, end; /* cf_clock_seconds */
    int64_t elems;
    bool compressed;
} cf_grad_sync_span;

/* The pass: buckets from the gradient block in backward order, the start and wait
 * nodes, and the communication thread. The graph must hold its backward and update
 * and not be planned yet. Returns NULL with err set (no buckets: a world of one needs
 * no pass; the caller skips it). */
cf_grad_sync *cf_grad_sync_create(cf_graph *g, cf_dist *d, const cf_parallel_config *pc, cf_error *err);
void cf_grad_sync_free(cf_grad_sync *s);

/* The next backward is the last micro-batch of optimizer step `step` (0-based): its
 * start nodes hand buckets over. Earlier micro-batches only accumulate. */
void cf_grad_sync_arm(cf_grad_sync *s, int64_t step);
/* 0 when the last step's communication succeeded, else -1 with the error (a timeout or
 * MPI's own, naming the bucket). */
int cf_grad_sync_status(const cf_grad_sync *s, cf_error *err);

const cf_grad_sync_stats *cf_grad_sync_last(const cf_grad_sync *s);
/* The last step's bucket spans; *n gets their count. */
const cf_grad_sync_span *cf_grad_sync_spans(const cf_grad_sync *s, int *n);
/* ZeRO-1: whether this rank holds only a shard of the optimizer state, and the
 * collective that gathers the moments' shards into whole blocks on rank 0 (malloc'd
 * into *m and *v there, NULL on the other ranks), for a checkpoint. */
bool cf_grad_sync_sharded(const cf_grad_sync *s);
int cf_grad_sync_gather_moments(cf_grad_sync *s, const float *shard_m, const float *shard_v, float **m, float **v,
                                cf_error *err);
/* A one-line description: "3 buckets (4.0 MiB), hierarchical over 2 nodes x 2, 1-bit after step 100". */
void cf_grad_sync_describe(const cf_grad_sync *s, char *buf, size_t size);

#endif
