/* SentencePiece BPE encoding: identity normalisation, then merging adjacent symbols by
 * the score of the joined piece, then byte fallback for characters outside the vocabulary.
 * Mirrors sentencepiece's normalizer.cc and bpe_model.cc. */
#include <stdlib.h>
#include <string.h>

#include "data/bpe_merge.h"
#include "data/tokenizer_internal.h"
#include "data/utf8.h"

static const char SP_SPACE[] = "\xe2\x96\x81";
static const char REPLACEMENT_CHAR[] = "\xef\xbf\xbd";

/* Appends the normalised text to out (room for 3*len + 3 bytes) and returns its length:
 * malformed UTF-8 bytes become U+FFFD, spaces become U+2581, optional dummy prefix and
 * whitespace squeezing. Only ' ' counts as whitespace, as in sentencepiece. */
static size_t normalize(const cf_tokenizer *t, const char *text, size_t len, char *out) {
    size_t i = 0, n = 0;
    if (t->remove_extra_whitespaces)
        while (i < len && text[i] == ' ') i++;
    if (i == len) return 0;
    const char *space = t->escape_whitespaces ? SP_SPACE : " ";
    size_t space_len = t->escape_whitespaces ? 3 : 1;
    if (t->add_dummy_prefix) {
        memcpy(out, space, space_len);
        n += space_len;
    }
    bool prev_space = t->add_dummy_prefix;
    while (i < len) {
        if (text[i] == ' ') {
            if (!(t->remove_extra_whitespaces && prev_space)) {
                memcpy(out + n, space, space_len);
                n += space_len;
            }
            prev_space = true;
            i++;
            continue;
        }
        prev_space = false;
        int clen = cf_utf8_valid_len((const unsigned char *)text + i, len - i);
        if (clen == 0) {
            memcpy(out + n, REPLACEMENT_CHAR, 3);
            n += 3;
            i++;
        } else {
            memcpy(out + n, text + i, (size_t)clen);
            n += (size_t)clen;
            i += (size_t)clen;
        }
    }
    if (t->remove_extra_whitespaces)
        while (n >= space_len && memcmp(out + n - space_len, space, space_len) == 0) n -= space_len;
    return n;
}

static bool sp_pair(const void *ctx, const char *text, const cf_merge_sym *l, const cf_merge_sym *r, float *score,
                    int32_t *id) {
    const cf_tokenizer *t = ctx;
    int32_t joined = cf_strmap_get(&t->piece_ids, text + l->start, (size_t)(l->len + r->len));
    if (joined < 0) return false;
    *score = t->scores[joined];
    *id = joined;
    return true;
}

size_t cf_sp_encode(const cf_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t n, size_t *cap) {
    char *norm = cf_xmalloc(3 * len + 4);
    size_t norm_len = normalize(t, text, len, norm);
    cf_merge_work work = {0};
    cf_merge_sym *syms = cf_merge_reserve(&work, norm_len);
    int32_t n_syms = 0;
    for (size_t i = 0; i < norm_len;) {
        int clen = cf_utf8_valid_len((const unsigned char *)norm + i, norm_len - i);
        syms[n_syms].start = (int32_t)i;
        syms[n_syms].len = clen;
        syms[n_syms].id = cf_strmap_get(&t->piece_ids, norm + i, (size_t)clen);
        n_syms++;
        i += (size_t)clen;
    }
    cf_merge_run(&work, norm, n_syms, sp_pair, t);
    bool prev_unk = false;
    for (int32_t s = n_syms ? 0 : -1; s >= 0; s = syms[s].next) {
        const cf_merge_sym *sym = &syms[s];
        if (sym->id >= 0) {
            n = cf_ids_push(ids, n, cap, sym->id);
            prev_unk = false;
        } else if (t->byte_fallback) {
            for (int32_t b = 0; b < sym->len; b++) {
                int id = t->byte_ids[(unsigned char)norm[sym->start + b]];
                n = cf_ids_push(ids, n, cap, id >= 0 ? id : t->unk);
            }
        } else if (!prev_unk) { /* sentencepiece folds a run of unknown characters into one <unk> */
            n = cf_ids_push(ids, n, cap, t->unk);
            prev_unk = true;
        }
    }
    cf_merge_work_free(&work);
    free(norm);
    return n;
}
