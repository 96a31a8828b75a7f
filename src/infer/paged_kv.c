/* The paged KV pool's bookkeeping: free stack, reference counts, published-block hashes,
 * copies for copy on write and swapping. */
#include "infer/paged_kv.h"

#include <stdlib.h>
#include <string.h>

#include "infer/matvec.h"
#include "infer/model_internal.h"

size_t cf_infer_kv_block_bytes(const cf_infer_model *m) {
    return 2 * (size_t)(m->cfg.num_layers * KV_BLOCK) * m->kv_row_bytes;
}

infer_kv_pool *cf_infer_kv_pool_new(const cf_infer_model *m, long n_blocks, cf_error *err) {
    if (n_blocks < 1) {
        cf_fail(err, "the KV pool needs at least one block, not %ld", n_blocks);
        return NULL;
    }
    if (m->kv_head_bytes > (INFER_CHUNK - 1) * sizeof(float)) { /* forward_paged.c's gather */
        cf_fail(err, "the paged KV cache takes heads of at most %d bytes per position, not %zu (head_dim %ld in %s)",
                (int)((INFER_CHUNK - 1) * sizeof(float)), m->kv_head_bytes, m->head_dim, cf_dtype_name(m->kv_dtype));
        return NULL;
    }
    infer_kv_pool *p = cf_xcalloc(1, sizeof *p);
    p->n_blocks = n_blocks, p->layers = m->cfg.num_layers, p->kv_dim = m->kv_dim, p->dtype = m->kv_dtype;
    p->row_bytes = m->kv_row_bytes, p->head_bytes = m->kv_head_bytes;
    size_t half = cf_infer_kv_block_bytes(m) / 2 * (size_t)n_blocks;
    p->k = malloc(half);
    p->v = malloc(half);
    if (!p->k || !p->v) {
        cf_fail(err, "no memory for a KV pool of %ld blocks (%.1f MiB)", n_blocks, 2.0 * (double)half / (1 << 20));
        cf_infer_kv_pool_free(p);
        return NULL;
    }
    p->ref = cf_xcalloc((size_t)n_blocks, sizeof *p->ref);
    p->free_ids = cf_xmalloc(sizeof *p->free_ids * (size_t)n_blocks);
    for (long i = 0; i < n_blocks; i++) p->free_ids[i] = (int32_t)(n_blocks - 1 - i); /* block 0 first */
    p->n_free = n_blocks;
    p->hash = cf_xcalloc((size_t)n_blocks, sizeof *p->hash);
    p->n_buckets = 2 * n_blocks;
    p->bucket = cf_xmalloc(sizeof *p->bucket * (size_t)p->n_buckets);
    for (long i = 0; i < p->n_buckets; i++) p->bucket[i] = -1;
    p->next = cf_xmalloc(sizeof *p->next * (size_t)n_blocks);
    long widest = m->hidden > m->dim ? m->hidden : m->dim;
    p->k_new = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->kv_dim);
    p->v_new = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->kv_dim);
    p->pairs = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)matvec_pairs_floats(widest));
    p->logits = cf_aligned_alloc(sizeof(float) * INFER_CHUNK * (size_t)m->vocab);
    p->tokens = cf_xmalloc(sizeof(int32_t) * INFER_CHUNK);
    p->positions = cf_xmalloc(sizeof(int32_t) * INFER_CHUNK);
    p->seg_of = cf_xmalloc(sizeof(int32_t) * INFER_CHUNK);
    p->lora_of = cf_xmalloc(sizeof(int32_t) * INFER_CHUNK);
    return p;
}

void cf_infer_kv_pool_free(infer_kv_pool *p) {
    if (!p) return;
    free(p->k), free(p->v), free(p->ref), free(p->free_ids), free(p->hash), free(p->bucket), free(p->next);
    cf_aligned_free(p->k_new), cf_aligned_free(p->v_new), cf_aligned_free(p->pairs), cf_aligned_free(p->logits);
    free(p->tokens), free(p->positions), free(p->seg_of), free(p->lora_of);
    free(p);
}

static void unpublish(infer_kv_pool *p, int32_t b) {
    if (!p->hash[b]) return;
    int32_t *link = &p->bucket[p->hash[b] % (uint64_t)p->n_buckets];
    while (*link != b) link = &p->next[*link];
    *link = p->next[b];
    p->hash[b] = 0;
}

int32_t cf_infer_kv_alloc(infer_kv_pool *p) {
    if (p->n_free == 0) return -1;
    int32_t b = p->free_ids[--p->n_free];
    p->ref[b] = 1;
    return b;
}

void cf_infer_kv_retain(infer_kv_pool *p, int32_t b) { p->ref[b]++; }

void cf_infer_kv_release(infer_kv_pool *p, int32_t b) {
    if (--p->ref[b] > 0) return;
    unpublish(p, b);
    p->free_ids[p->n_free++] = b;
}

/* Where layer l's rows of block b start, in keys or values. */
static char *block_rows(const infer_kv_pool *p, char *base, long l, int32_t b) {
    return base + (size_t)((l * p->n_blocks + b) * KV_BLOCK) * p->row_bytes;
}

void cf_infer_kv_copy(infer_kv_pool *p, int32_t dst, int32_t src) {
    size_t n = KV_BLOCK * p->row_bytes;
    for (long l = 0; l < p->layers; l++) {
        memcpy(block_rows(p, p->k, l, dst), block_rows(p, p->k, l, src), n);
        memcpy(block_rows(p, p->v, l, dst), block_rows(p, p->v, l, src), n);
    }
}

void cf_infer_kv_save(const infer_kv_pool *p, int32_t b, void *dst) {
    size_t n = KV_BLOCK * p->row_bytes;
    char *out = dst;
    for (long l = 0; l < p->layers; l++) {
        memcpy(out, block_rows(p, p->k, l, b), n), out += n;
        memcpy(out, block_rows(p, p->v, l, b), n), out += n;
    }
}

void cf_infer_kv_load(infer_kv_pool *p, int32_t b, const void *src) {
    size_t n = KV_BLOCK * p->row_bytes;
    const char *in = src;
    for (long l = 0; l < p->layers; l++) {
        memcpy(block_rows(p, p->k, l, b), in, n), in += n;
        memcpy(block_rows(p, p->v, l, b), in, n), in += n;
    }
}

void cf_infer_kv_publish(infer_kv_pool *p, int32_t b, uint64_t hash) {
    if (p->hash[b] || !hash || cf_infer_kv_lookup(p, hash) >= 0) return;
    p->hash[b] = hash;
    int32_t *head = &p->bucket[hash % (uint64_t)p->n_buckets];
    p->next[b] = *head;
    *head = b;
}

int32_t cf_infer_kv_lookup(const infer_kv_pool *p, uint64_t hash) {
    for (int32_t b = p->bucket[hash % (uint64_t)p->n_buckets]; b >= 0; b = p->next[b])
        if (p->hash[b] == hash) return b;
    return -1;
}

uint64_t cf_infer_kv_chain_hash(uint64_t prefix, const int32_t *tokens) {
    uint64_t h = prefix ^ 0x9e3779b97f4a7c15ull; /* FNV-1a over the prefix hash and the tokens */
    for (int i = 0; i < KV_BLOCK; i++) {
        uint32_t t = (uint32_t)tokens[i];
        for (int byte = 0; byte < 4; byte++) h = (h ^ ((t >> (8 * byte)) & 0xff)) * 1099511628211ull;
    }
    return h ? h : 1;
}
