/* Tokenizer handle: format detection, accessors, encode dispatch and decoding. */
#include "data/tokenizer_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/file_util.h"
#include "data/pretokenize.h"

cf_tokenizer *cf_tok_new(cf_tok_kind kind, int n) {
    cf_tokenizer *t = cf_xcalloc(1, sizeof *t);
    t->kind = kind;
    t->vocab_size = n;
    t->pieces = cf_xcalloc((size_t)n, sizeof *t->pieces);
    t->piece_len = cf_xcalloc((size_t)n, sizeof *t->piece_len);
    t->scores = cf_xcalloc((size_t)n, sizeof *t->scores);
    t->types = cf_xcalloc((size_t)n, sizeof *t->types);
    t->added_flags = cf_xcalloc((size_t)n, sizeof *t->added_flags);
    cf_strmap_init(&t->piece_ids);
    cf_strmap_init(&t->merges);
    t->bos = t->eos = t->unk = -1;
    for (int b = 0; b < 256; b++) t->byte_ids[b] = -1;
    return t;
}

void cf_tok_set_piece(cf_tokenizer *t, int id, const char *text, size_t len) {
    free(t->pieces[id]);
    t->pieces[id] = cf_xmalloc(len + 1);
    memcpy(t->pieces[id], text, len);
    t->pieces[id][len] = '\0';
    t->piece_len[id] = (uint32_t)len;
}

const char *cf_tok_quote(const char *s, size_t len, char out[CF_TOK_QUOTE_SIZE]) {
    size_t n = len < 40 ? len : 40;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        out[i] = c < 0x20 || c == 0x7f || c == '"' || c == '\\' ? '?' : (char)c;
    }
    strcpy(out + n, len > n ? "..." : "");
    return out;
}

void cf_tokenizer_free(cf_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->vocab_size; i++) free(t->pieces[i]);
    free(t->pieces);
    free(t->piece_len);
    free(t->scores);
    free(t->types);
    free(t->added_flags);
    free(t->added);
    for (int i = 0; t->text && i < t->vocab_size; i++) free(t->text[i]);
    free(t->text);
    free(t->text_len);
    free(t->merge_result);
    cf_strmap_free(&t->piece_ids);
    cf_strmap_free(&t->merges);
    cf_bpe_cache_free(t->cache);
    free(t);
}

static bool has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

cf_tokenizer *cf_tokenizer_load(const char *path, cf_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        cf_fail(err, "%s: cannot open tokenizer: %s", path, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) return cf_bpe_load_gpt2_dir(path, err);
    size_t size;
    unsigned char *data = cf_read_file(path, &size, err);
    if (!data) return NULL;
    cf_tokenizer *t = cf_tokenizer_load_memory(path, data, size, err);
    free(data);
    return t;
}

cf_tokenizer *cf_tokenizer_load_memory(const char *name, const void *bytes, size_t size, cf_error *err) {
    const unsigned char *data = bytes;
    /* tokenizer.json starts with '{'; a ModelProto with field 1 (pieces) starts with 0x0a;
     * anything else is tried as llama2.c's tokenizer.bin, which validates its own layout. */
    size_t skip = 0;
    while (skip < size && (data[skip] == ' ' || data[skip] == '\n' || data[skip] == '\t' || data[skip] == '\r')) skip++;
    if (skip < size && data[skip] == '{') return cf_bpe_load_hf_json(name, (const char *)data, size, err);
    if (cf_tiktoken_sniff(data, size)) return cf_tiktoken_load(name, (const char *)data, size, err);
    if (size > 0 && data[0] == 0x0a && !has_suffix(name, ".bin")) return cf_sp_load_model(name, data, size, err);
    return cf_sp_load_llama2c(name, data, size, err);
}

int cf_tokenizer_vocab_size(const cf_tokenizer *t) { return t->vocab_size; }

const char *cf_tokenizer_token(const cf_tokenizer *t, int32_t id, size_t *len) {
    *len = id >= 0 && id < t->vocab_size ? t->piece_len[id] : 0;
    const char *p = *len ? t->pieces[id] : "";
    /* llama2.c writes BOS and EOS as "\n<s>\n" and "\n</s>\n" */
    while (*len > 1 && t->types[id] == SP_CONTROL && (p[0] == '\n' || p[*len - 1] == '\n')) {
        if (p[0] == '\n') p++;
        (*len)--;
    }
    return p;
}

const char *cf_tokenizer_type(const cf_tokenizer *t) {
    switch (t->kind) {
    case CF_TOK_SENTENCEPIECE: return "sentencepiece-bpe";
    case CF_TOK_BYTE_LEVEL: return "byte-level-bpe";
    }
    return "unknown";
}

uint64_t cf_tokenizer_fingerprint(const cf_tokenizer *t) {
    uint64_t h = cf_strmap_hash(&t->vocab_size, sizeof t->vocab_size);
    for (int id = 0; id < t->vocab_size; id++) h = h * 31 + cf_strmap_hash(t->pieces[id], t->piece_len[id]);
    return h;
}

int cf_tokenizer_bos(const cf_tokenizer *t) { return t->bos; }
int cf_tokenizer_eos(const cf_tokenizer *t) { return t->eos; }

/* Ids of ordinary text (no added-token matching), appended. */
static size_t encode_plain(const cf_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t n, size_t *cap) {
    return t->kind == CF_TOK_SENTENCEPIECE ? cf_sp_encode(t, text, len, ids, n, cap)
                                           : cf_bpe_encode(t, text, len, ids, n, cap);
}

static bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static bool is_word(unsigned char c) { return c == '_' || c >= 0x80 || (unsigned)((c | 0x20) - 'a') < 26u || (unsigned)(c - '0') < 10u; }

/* The added token at text[i], leftmost-longest as Hugging Face's AddedVocabulary matches,
 * or NULL. */
static const cf_tok_added *added_at(const cf_tokenizer *t, const char *text, size_t len, size_t i) {
    for (int k = 0; k < t->n_added; k++) {
        const cf_tok_added *a = &t->added[k];
        if (a->len > len - i || memcmp(text + i, a->s, a->len) != 0) continue;
        if ((a->flags & CF_ADDED_SINGLE_WORD) &&
            ((i > 0 && is_word((unsigned char)text[i - 1])) ||
             (i + a->len < len && is_word((unsigned char)text[i + a->len]))))
            continue;
        return a;
    }
    return NULL;
}

/* Ordinary text between added tokens is encoded on its own, as Hugging Face and llama.cpp
 * do (so SentencePiece's dummy prefix starts each piece of text). */
static size_t encode_special(const cf_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t n,
                             size_t *cap) {
    size_t seg = 0;
    for (size_t i = 0; i < len;) {
        const cf_tok_added *a = t->added_first[(unsigned char)text[i]] ? added_at(t, text, len, i) : NULL;
        if (!a) {
            i++;
            continue;
        }
        size_t before = i, end = i + a->len;
        if (a->flags & CF_ADDED_LSTRIP)
            while (before > seg && is_space((unsigned char)text[before - 1])) before--;
        if (a->flags & CF_ADDED_RSTRIP)
            while (end < len && is_space((unsigned char)text[end])) end++;
        n = encode_plain(t, text + seg, before - seg, ids, n, cap);
        n = cf_ids_push(ids, n, cap, a->id);
        seg = i = end;
    }
    return encode_plain(t, text + seg, len - seg, ids, n, cap);
}

static long encode(const cf_tokenizer *t, const char *text, size_t len, bool add_bos, bool special, int32_t **ids,
                   cf_error *err) {
    *ids = NULL;
    if (len > INT32_MAX / 2) return cf_fail(err, "tokenizer: text of %zu bytes is too long for one call", len);
    size_t cap = 0, n = 0;
    if (add_bos && t->bos >= 0) n = cf_ids_push(ids, n, &cap, t->bos);
    n = special ? encode_special(t, text, len, ids, n, &cap) : encode_plain(t, text, len, ids, n, &cap);
    if (!*ids) *ids = cf_xmalloc(sizeof **ids); /* callers may free an empty result */
    return (long)n;
}

long cf_tokenizer_encode(const cf_tokenizer *t, const char *text, size_t len, bool add_bos, int32_t **ids,
                         cf_error *err) {
    return encode(t, text, len, add_bos, false, ids, err);
}

long cf_tokenizer_encode_special(const cf_tokenizer *t, const char *text, size_t len, bool add_bos, int32_t **ids,
                                 cf_error *err) {
    return encode(t, text, len, add_bos, true, ids, err);
}

static int added_longer_first(const void *a, const void *b) {
    const cf_tok_added *x = a, *y = b;
    return x->len != y->len ? (x->len < y->len ? 1 : -1) : (x->id > y->id) - (x->id < y->id);
}

/* The added tokens that text can name: control and user-defined ones with a spelling. */
static void index_added(cf_tokenizer *t) {
    free(t->added);
    t->n_added = 0;
    memset(t->added_first, 0, sizeof t->added_first);
    t->added = cf_xcalloc((size_t)t->vocab_size, sizeof *t->added);
    for (int id = 0; id < t->vocab_size; id++) {
        if (t->types[id] != SP_CONTROL && t->types[id] != SP_USER_DEFINED) continue;
        size_t len;
        const char *s = cf_tokenizer_token(t, id, &len);
        if (!len) continue;
        t->added[t->n_added++] = (cf_tok_added){.s = s, .len = (uint32_t)len, .id = id, .flags = t->added_flags[id]};
        t->added_first[(unsigned char)s[0]] = true;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, added_longer_first);
}

static const char SP_SPACE[] = "\xe2\x96\x81"; /* U+2581: SentencePiece's space */
static const char SP_UNK_SURFACE[] = " \xe2\x81\x87 "; /* what SentencePiece prints for <unk> */

void cf_tok_finish(cf_tokenizer *t) {
    t->text = cf_xcalloc((size_t)t->vocab_size, sizeof *t->text);
    t->text_len = cf_xcalloc((size_t)t->vocab_size, sizeof *t->text_len);
    for (int id = 0; id < t->vocab_size; id++) {
        const char *p = t->pieces[id] ? t->pieces[id] : "";
        size_t n = t->piece_len[id], out = 0;
        char *txt = cf_xmalloc(n + 1);
        if (t->types[id] == SP_BYTE) {
            for (int b = 0; b < 256; b++)
                if (t->byte_ids[b] == id) txt[out++] = (char)b;
        } else if (t->types[id] == SP_UNKNOWN && t->kind == CF_TOK_SENTENCEPIECE) {
            free(txt);
            txt = cf_xstrdup(SP_UNK_SURFACE);
            out = strlen(txt);
        } else if (t->types[id] != SP_CONTROL) {
            for (size_t i = 0; i < n;) {
                if (t->kind == CF_TOK_SENTENCEPIECE && i + 3 <= n && memcmp(p + i, SP_SPACE, 3) == 0) {
                    txt[out++] = ' ';
                    i += 3;
                } else {
                    txt[out++] = p[i++];
                }
            }
        }
        txt[out] = '\0';
        t->text[id] = txt;
        t->text_len[id] = (uint32_t)out;
    }
    index_added(t);
}

static const char *piece_text(const cf_tokenizer *t, bool at_start, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->vocab_size) return "";
    const char *p = t->text[id];
    size_t n = t->text_len[id];
    /* The dummy prefix space is not part of the text: drop it at the start. */
    if (at_start && t->kind == CF_TOK_SENTENCEPIECE && t->add_dummy_prefix && n && p[0] == ' ' &&
        t->types[id] == SP_NORMAL) {
        p++;
        n--;
    }
    *len = n;
    return p;
}

const char *cf_tokenizer_piece(const cf_tokenizer *t, int32_t prev, int32_t id, char *scratch, size_t *len) {
    (void)scratch;
    return piece_text(t, prev < 0 || prev == t->bos, id, len);
}

char *cf_tokenizer_decode(const cf_tokenizer *t, const int32_t *ids, size_t n) {
    size_t cap = 64, len = 0;
    char *out = cf_xmalloc(cap);
    for (size_t i = 0; i < n; i++) {
        size_t plen;
        const char *p = piece_text(t, len == 0, ids[i], &plen);
        if (len + plen + 1 > cap) {
            cap = (len + plen + 1) * 2;
            out = cf_xrealloc(out, cap);
        }
        memcpy(out + len, p, plen);
        len += plen;
    }
    out[len] = '\0';
    return out;
}
