/* The paged KV cache: a pool of fixed-size blocks of keys and values (KV_BLOCK tokens of
 * every layer each), handed to sequences as they grow. A sequence's block table maps its
 * position p to block table[p / KV_BLOCK], row p % KV_BLOCK. Blocks carry a reference
 * count (prefix sharing: several sequences' tables may name one block, which is then
 * copied before it is written) and, once full of prompt tokens, a content hash under
 * which later sequences with the same prefix find it.
 *
 * cf_infer_forward_paged runs one step of continuous batching: any number of sequences, each
 * with some tokens at its next positions (one to decode, or a chunk of its prompt), as one
 * batch. Each weight is read once per step for all tokens (cf_infer_matvec_batch), and every
 * token's result is the one forward.c's single-token decode gives it, bit for bit with an
 * f32 cache: the batch, the chunking of a prompt and the block layout change nothing. */
#ifndef CFORMERS_INFER_PAGED_KV_H
#define CFORMERS_INFER_PAGED_KV_H

#include <stdint.h>

#include "cformers/infer.h"

enum { KV_BLOCK = 16 };

typedef struct infer_kv_pool {
    long n_blocks, layers, kv_dim;
    cf_dtype dtype; /* the model's KV dtype, CF_F32, CF_BF16 or CF_Q8_0 */
    size_t row_bytes, head_bytes; /* one position's row and one KV head's slice of it */
    char *k, *v;       /* [layers, n_blocks, KV_BLOCK] rows of row_bytes */
    int32_t *ref;      /* [n_blocks] sequences holding each block; 0 = free */
    int32_t *free_ids; /* stack of free blocks, n_free of them */
    long n_free;
    uint64_t *hash;    /* [n_blocks] content hash of a published full block, 0 = none */
    int32_t *bucket, *next; /* hash chains: bucket[hash % n_buckets] -> block -> next[block] */
    long n_buckets;
    /* scratch of one batched step (up to INFER_CHUNK tokens) */
    float *k_new, *v_new, *pairs, *logits;
    int32_t *tokens, *positions, *seg_of, *lora_of;
} infer_kv_pool;

/* Bytes one block takes (keys and values of every layer). */
size_t cf_infer_kv_block_bytes(const cf_infer_model *m);
/* A pool of n_blocks blocks in the model's KV dtype; NULL with err set when the memory
 * is not there. */
infer_kv_pool *cf_infer_kv_pool_new(const cf_infer_model *m, long n_blocks, cf_error *err);
void cf_infer_kv_pool_free(infer_kv_pool *p);

/* A free block with one reference, or -1 when none is left. */
int32_t cf_infer_kv_alloc(infer_kv_pool *p);
void cf_infer_kv_retain(infer_kv_pool *p, int32_t b);
/* Drops a reference; the last one frees the block (and forgets its hash). */
void cf_infer_kv_release(infer_kv_pool *p, int32_t b);
/* Copies block src's rows of every layer into dst (copy on write). */
void cf_infer_kv_copy(infer_kv_pool *p, int32_t dst, int32_t src);
/* Publishes a full block under `hash` (nonzero) / finds a block published under it (-1). */
void cf_infer_kv_publish(infer_kv_pool *p, int32_t b, uint64_t hash);
int32_t cf_infer_kv_lookup(const infer_kv_pool *p, uint64_t hash);
/* A block's contents to / from cf_infer_kv_block_bytes(m) bytes of host memory (swapping). */
void cf_infer_kv_save(const infer_kv_pool *p, int32_t b, void *dst);
void cf_infer_kv_load(infer_kv_pool *p, int32_t b, const void *src);

/* The hash of a full block of tokens following a prefix whose hash is `prefix` (0 at the
 * start): equal hashes mean equal token prefixes (up to 64-bit collisions). */
uint64_t cf_infer_kv_chain_hash(uint64_t prefix, const int32_t *tokens);

/* Some tokens of one sequence: tokens[n] at positions pos .. pos+n-1, whose rows go to
 * the blocks the table names (which must hold positions 0 .. pos-1 already and have room
 * up to pos+n-1, with one reference each where written). logits, when not NULL, receives
 * the last token's [vocab]. */
typedef struct infer_segment {
    const int32_t *tokens;
    long n, pos;
    const int32_t *blocks;
    float *logits;
    int lora; /* the served adapter its tokens take (cf_infer_add_lora's id), 0: the base */
} infer_segment;

/* One batched step over segments totalling at most INFER_CHUNK tokens. */
int cf_infer_forward_paged(cf_infer_model *m, infer_kv_pool *p, const infer_segment *segs, int n_segs, cf_error *err);

#endif
