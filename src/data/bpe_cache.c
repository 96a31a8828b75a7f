#include "data/bpe_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/error.h"
#include "data/strmap.h"

enum { STRIPES = 64, STRIPE_BUDGET_IDS = 1 << 18 };

typedef struct stripe {
    pthread_mutex_t lock;
    cf_strmap words; /* word -> offset in ids, where ids[off] is the count */
    int32_t *ids;
    size_t n_ids, cap_ids;
} stripe;

struct cf_bpe_cache {
    stripe stripes[STRIPES];
};

cf_bpe_cache *cf_bpe_cache_new(void) {
    cf_bpe_cache *c = cf_xcalloc(1, sizeof *c);
    for (int i = 0; i < STRIPES; i++) {
        pthread_mutex_init(&c->stripes[i].lock, NULL);
        cf_strmap_init(&c->stripes[i].words);
    }
    return c;
}

void cf_bpe_cache_free(cf_bpe_cache *c) {
    if (!c) return;
    for (int i = 0; i < STRIPES; i++) {
        pthread_mutex_destroy(&c->stripes[i].lock);
        cf_strmap_free(&c->stripes[i].words);
        free(c->stripes[i].ids);
    }
    free(c);
}

static stripe *stripe_of(cf_bpe_cache *c, const char *word, size_t len) {
    return &c->stripes[cf_strmap_hash(word, len) % STRIPES];
}

int cf_bpe_cache_get(cf_bpe_cache *c, const char *word, size_t len, int32_t *out, int max) {
    stripe *s = stripe_of(c, word, len);
    pthread_mutex_lock(&s->lock);
    int32_t off = cf_strmap_get(&s->words, word, len);
    int n = -1;
    if (off >= 0 && s->ids[off] <= max) {
        n = s->ids[off];
        memcpy(out, s->ids + off + 1, (size_t)n * sizeof *out);
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

void cf_bpe_cache_put(cf_bpe_cache *c, const char *word, size_t len, const int32_t *ids, int n) {
    stripe *s = stripe_of(c, word, len);
    pthread_mutex_lock(&s->lock);
    if (s->n_ids + (size_t)n + 1 > STRIPE_BUDGET_IDS) {
        cf_strmap_free(&s->words);
        cf_strmap_init(&s->words);
        s->n_ids = 0;
    }
    if (s->n_ids + (size_t)n + 1 > s->cap_ids) {
        s->cap_ids = (s->n_ids + (size_t)n + 1) * 2;
        s->ids = cf_xrealloc(s->ids, s->cap_ids * sizeof *s->ids);
    }
    if (cf_strmap_get(&s->words, word, len) < 0) {
        cf_strmap_put(&s->words, word, len, (int32_t)s->n_ids);
        s->ids[s->n_ids] = n;
        memcpy(s->ids + s->n_ids + 1, ids, (size_t)n * sizeof *ids);
        s->n_ids += (size_t)n + 1;
    }
    pthread_mutex_unlock(&s->lock);
}
