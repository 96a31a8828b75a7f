/* A thread-safe cache from a pre-tokenised word to its ids, so byte-level BPE runs the
 * merge loop once per distinct word. The table is split into stripes, each with its own
 * lock, so concurrent preprocessing workers rarely wait on each other; a stripe that
 * grows past its budget is emptied and starts again. */
#ifndef CFORMERS_DATA_BPE_CACHE_H
#define CFORMERS_DATA_BPE_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct cf_bpe_cache cf_bpe_cache;

cf_bpe_cache *cf_bpe_cache_new(void);
void cf_bpe_cache_free(cf_bpe_cache *c);
/* Copies the cached ids of `word` into out (room for max ids) and returns their count,
 * or -1 when the word is not cached (or has more than max ids). */
int cf_bpe_cache_get(cf_bpe_cache *c, const char *word, size_t len, int32_t *out, int max);
void cf_bpe_cache_put(cf_bpe_cache *c, const char *word, size_t len, const int32_t *ids, int n);

#endif
