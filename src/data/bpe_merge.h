/* The merge loop shared by SentencePiece BPE (merge the adjacent pair whose joined piece
 * has the highest score) and byte-level BPE (merge the pair with the lowest rank): a
 * priority queue over adjacent pairs, leftmost first on ties, O(n log n) in the number
 * of symbols. */
#ifndef CFORMERS_DATA_BPE_MERGE_H
#define CFORMERS_DATA_BPE_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cf_merge_sym {
    int32_t start, len; /* bytes of the text this symbol covers; len 0 once merged away */
    int32_t prev, next; /* neighbours, -1 at the ends */
    int32_t id;         /* token id, or -1 for a character outside the vocabulary */
} cf_merge_sym;

typedef struct cf_merge_cand {
    float score;
    int32_t left, right, size, id;
} cf_merge_cand;

/* Reusable scratch space, so repeated calls allocate nothing once warm. */
typedef struct cf_merge_work {
    cf_merge_sym *syms;
    size_t sym_cap;
    cf_merge_cand *heap;
    size_t heap_n, heap_cap;
} cf_merge_work;

/* Whether symbols l and r (adjacent, l first) may merge, and if so into which id with
 * which priority. */
typedef bool (*cf_pair_fn)(const void *ctx, const char *text, const cf_merge_sym *l, const cf_merge_sym *r,
                           float *score, int32_t *id);

/* Makes room for n symbols in w->syms; the caller fills start/len/id, then calls run. */
cf_merge_sym *cf_merge_reserve(cf_merge_work *w, size_t n);
/* Links the n symbols in order and merges until no pair qualifies. The survivors are
 * reached from symbol 0 through `next`. */
void cf_merge_run(cf_merge_work *w, const char *text, int32_t n, cf_pair_fn pair, const void *ctx);
void cf_merge_work_free(cf_merge_work *w);

#endif
