/* Byte-level BPE encoding (GPT-2, tokenizer.json, `cformers tokenizer train` output):
 * pre-tokenise, then per word start from single bytes and apply merges by rank. Each
 * distinct word is merged once and then served from the shared cache. */
#include <stdlib.h>
#include <string.h>

#include "data/bpe_merge.h"
#include "data/pretokenize.h"
#include "data/tokenizer_internal.h"

enum { CACHEABLE_WORD_BYTES = 128 };

static bool rank_pair(const void *ctx, const char *text, const cf_merge_sym *l, const cf_merge_sym *r, float *score,
                      int32_t *id) {
    (void)text;
    const cf_tokenizer *t = ctx;
    int32_t key[2] = {l->id, r->id};
    int32_t rank = cf_strmap_get(&t->merges, key, sizeof key);
    if (rank < 0) return false;
    *score = -(float)rank;
    *id = t->merge_result[rank];
    return true;
}

int cf_bpe_add_merge(cf_tokenizer *t, int32_t left, int32_t right, cf_error *err) {
    size_t llen = t->piece_len[left], rlen = t->piece_len[right];
    int32_t joined = cf_strmap_get2(&t->piece_ids, t->pieces[left], llen, t->pieces[right], rlen);
    char ql[CF_TOK_QUOTE_SIZE], qr[CF_TOK_QUOTE_SIZE];
    if (joined < 0)
        return cf_fail(err, "merge %d (\"%s\" + \"%s\") makes a token missing from the vocabulary", t->n_merges,
                       cf_tok_quote(t->pieces[left], llen, ql), cf_tok_quote(t->pieces[right], rlen, qr));
    int32_t key[2] = {left, right};
    if (cf_strmap_get(&t->merges, key, sizeof key) >= 0) return 0; /* a repeated merge keeps its first rank */
    int n = t->n_merges; /* capacity: the next power of two, so loading 280K merges copies O(n) */
    if ((n & (n - 1)) == 0) t->merge_result = cf_xrealloc(t->merge_result, (size_t)(n ? 2 * n : 1) * sizeof *t->merge_result);
    t->merge_result[t->n_merges] = joined;
    cf_strmap_put(&t->merges, key, sizeof key, t->n_merges);
    t->n_merges++;
    return 0;
}

/* Ids of one pre-token, appended to *ids. */
static size_t encode_word(const cf_tokenizer *t, cf_merge_work *work, const char *word, size_t len, int32_t **ids,
                          size_t n, size_t *cap) {
    int32_t cached[CACHEABLE_WORD_BYTES];
    bool cacheable = len <= CACHEABLE_WORD_BYTES;
    if (cacheable) {
        int got = cf_bpe_cache_get(t->cache, word, len, cached, CACHEABLE_WORD_BYTES);
        if (got >= 0) {
            for (int k = 0; k < got; k++) n = cf_ids_push(ids, n, cap, cached[k]);
            return n;
        }
    }
    int32_t whole = t->ignore_merges ? cf_strmap_get(&t->piece_ids, word, len) : -1;
    if (whole >= 0) return cf_ids_push(ids, n, cap, whole);
    cf_merge_sym *syms = cf_merge_reserve(work, len);
    for (size_t b = 0; b < len; b++)
        syms[b] = (cf_merge_sym){.start = (int32_t)b, .len = 1, .id = t->byte_ids[(unsigned char)word[b]]};
    cf_merge_run(work, word, (int32_t)len, rank_pair, t);
    int got = 0;
    for (int32_t s = 0; s >= 0; s = syms[s].next) {
        /* A byte with no token of its own (only in hand-made vocabularies) is dropped. */
        if (syms[s].id < 0) continue;
        n = cf_ids_push(ids, n, cap, syms[s].id);
        if (cacheable) cached[got++] = syms[s].id;
    }
    if (cacheable) cf_bpe_cache_put(t->cache, word, len, cached, got);
    return n;
}

size_t cf_bpe_encode(const cf_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t n, size_t *cap) {
    cf_merge_work work = {0};
    for (size_t i = 0; i < len;) {
        size_t wlen = t->pretoken(text, len, i);
        n = encode_word(t, &work, text + i, wlen, ids, n, cap);
        i += wlen;
    }
    cf_merge_work_free(&work);
    return n;
}
