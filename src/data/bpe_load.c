/* Loading byte-level BPE vocabularies: GPT-2's encoder.json + vocab.bpe, and Hugging Face
 * tokenizer.json with a BPE model and ByteLevel pre-tokeniser. Both spell token bytes
 * through GPT-2's byte <-> unicode table, undone here so tokens hold raw bytes. */
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file_util.h"
#include "data/pretokenize.h"
#include "data/tokenizer_internal.h"
#include "data/utf8.h"

/* GPT-2's bytes_to_unicode(): printable bytes map to themselves, the rest to 256 + k. */
void cf_bpe_byte_to_unicode(uint32_t table[256]) {
    int k = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        table[b] = printable ? (uint32_t)b : (uint32_t)(256 + k++);
    }
}

size_t cf_bpe_spell(const char *raw, size_t len, char *out) {
    uint32_t table[256];
    cf_bpe_byte_to_unicode(table);
    char *o = out;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = table[(unsigned char)raw[i]];
        if (cp < 0x80) {
            *o++ = (char)cp;
        } else {
            *o++ = (char)(0xc0 | (cp >> 6));
            *o++ = (char)(0x80 | (cp & 0x3f));
        }
    }
    *o = '\0';
    return (size_t)(o - out);
}

/* Decodes a GPT-2-spelled token into raw bytes (out has room for strlen(s) bytes);
 * returns the length, or -1 when a character is outside the byte table. */
static int inverse[512];
static pthread_once_t inverse_once = PTHREAD_ONCE_INIT;

static void build_inverse(void) {
    uint32_t table[256];
    cf_bpe_byte_to_unicode(table);
    for (int i = 0; i < 512; i++) inverse[i] = -1;
    for (int b = 0; b < 256; b++) inverse[table[b]] = b;
}

static long unspell(const char *s, size_t len, char *out) {
    pthread_once(&inverse_once, build_inverse);
    long n = 0;
    for (size_t i = 0; i < len;) {
        int clen;
        uint32_t cp = cf_utf8_decode((const unsigned char *)s + i, len - i, &clen);
        if (cp >= 512 || inverse[cp] < 0) return -1;
        out[n++] = (char)inverse[cp];
        i += (size_t)clen;
    }
    return n;
}

/* Sets token `id` from its GPT-2 spelling, or verbatim for special tokens. */
static int set_spelled(cf_tokenizer *t, int id, const char *spelled, bool special, const char *path,
                       cf_error *err) {
    size_t len = strlen(spelled);
    char *raw = cf_xmalloc(len + 1);
    long n = special ? (long)len : unspell(spelled, len, raw);
    if (special) memcpy(raw, spelled, len);
    if (n < 0) {
        free(raw);
        char q[CF_TOK_QUOTE_SIZE];
        return cf_fail(err, "%s: token %d \"%s\" has a character outside the byte-level alphabet", path, id,
                       cf_tok_quote(spelled, len, q));
    }
    cf_tok_set_piece(t, id, raw, (size_t)n);
    free(raw);
    t->types[id] = special ? SP_CONTROL : SP_NORMAL;
    if (!special) {
        if (cf_strmap_get(&t->piece_ids, t->pieces[id], (size_t)n) < 0)
            cf_strmap_put(&t->piece_ids, t->pieces[id], (size_t)n, id);
        if (n == 1) t->byte_ids[(unsigned char)t->pieces[id][0]] = id;
    }
    return 0;
}

/* One merge given as its two spelled halves. */
static int add_spelled_merge(cf_tokenizer *t, const char *a, const char *b, const char *path, long line,
                             cf_error *err) {
    /* unspelled, a half is at most as long as its spelling: a token of any length (one of
     * 128 NUL bytes spells as 256 bytes of "Ā"; a 256-byte buffer refused it) */
    size_t la = strlen(a), lb = strlen(b);
    char *ra = cf_xmalloc(la + 1), *rb = cf_xmalloc(lb + 1);
    long na = unspell(a, la, ra), nb = unspell(b, lb, rb);
    int32_t left = na < 0 ? -1 : cf_strmap_get(&t->piece_ids, ra, (size_t)na);
    int32_t right = nb < 0 ? -1 : cf_strmap_get(&t->piece_ids, rb, (size_t)nb);
    free(ra);
    free(rb);
    char qa[CF_TOK_QUOTE_SIZE], qb[CF_TOK_QUOTE_SIZE];
    if (left < 0 || right < 0)
        return cf_fail(err, "%s: merge %ld (\"%s %s\"): token not in the vocabulary", path, line,
                       cf_tok_quote(a, la, qa), cf_tok_quote(b, lb, qb));
    if (cf_bpe_add_merge(t, left, right, err) != 0) return cf_fail_prefix(err, "%s: ", path);
    return 0;
}

int cf_bpe_finish(cf_tokenizer *t, const char *path, cf_error *err) {
    for (int b = 0; b < 256; b++)
        if (t->byte_ids[b] < 0) return cf_fail(err, "%s: no token for byte 0x%02x", path, b);
    for (int id = 0; id < t->vocab_size; id++)
        if (!t->pieces[id]) return cf_fail(err, "%s: token id %d is missing", path, id);
    t->cache = cf_bpe_cache_new();
    cf_tok_finish(t);
    return 0;
}

static int special_id(const cf_tokenizer *t, const char *const *names) {
    for (int k = 0; names[k]; k++)
        for (int id = 0; id < t->vocab_size; id++)
            if (t->types[id] == SP_CONTROL && strcmp(t->pieces[id], names[k]) == 0) return id;
    return -1;
}

void cf_bpe_find_specials(cf_tokenizer *t) {
    static const char *const bos[] = {"<|begin_of_text|>", "<s>", "<|endoftext|>", NULL};
    static const char *const eos[] = {"<|end_of_text|>", "</s>", "<|endoftext|>", NULL};
    t->bos = special_id(t, bos);
    t->eos = special_id(t, eos);
}

/* Checks that v is an integer id below `entries`, storing it in *id; else fails naming
 * `where` (a vocab key or an added_tokens index) and the id. */
static int check_id(json_t *v, size_t entries, json_int_t *id, const char *path, const char *where, cf_error *err) {
    if (!json_is_integer(v)) return cf_fail(err, "%s: %s: the id is not an integer", path, where);
    *id = json_integer_value(v);
    if (*id < 0 || (uint64_t)*id >= entries)
        return cf_fail(err, "%s: %s: id %lld is not below %zu, the number of tokens the file lists", path, where,
                       (long long)*id, entries);
    return 0;
}

/* The vocabulary size the ids of `vocab` (an object, token -> id; `field` names it in
 * errors) and of `added` (tokenizer.json's added_tokens, or NULL) imply, checked before
 * anything is sized from them. Ids are dense (finish() wants every one), so each must be
 * below the number of tokens the file lists, which bounds the tables by the file's size.
 * -1 with err naming the file, the field and the id. */
static int vocabulary_size(json_t *vocab, const char *field, json_t *added, const char *path, cf_error *err) {
    size_t entries = json_object_size(vocab) + json_array_size(added);
    if (entries > INT32_MAX) return cf_fail(err, "%s: %zu tokens are too many", path, entries);
    json_int_t max = -1, id = -1;
    char where[CF_TOK_QUOTE_SIZE + 64], q[CF_TOK_QUOTE_SIZE];
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        snprintf(where, sizeof where, "%s \"%s\"", field, cf_tok_quote(key, strlen(key), q));
        if (check_id(v, entries, &id, path, where, err) != 0) return -1;
        if (id > max) max = id;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        json_t *a = json_array_get(added, i);
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!json_is_string(json_object_get(a, "content")))
            return cf_fail(err, "%s: %s: needs a string content", path, where);
        if (check_id(json_object_get(a, "id"), entries, &id, path, where, err) != 0) return -1;
        if (id > max) max = id;
    }
    return (int)(max + 1);
}

/* Sets every token of `vocab`, whose ids vocabulary_size() has checked. */
static int load_vocab(cf_tokenizer *t, json_t *vocab, const char *path, cf_error *err) {
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        bool special = key[0] == '<' && key[1] == '|' && strstr(key, "|>") != NULL;
        if (set_spelled(t, (int)json_integer_value(v), key, special, path, err) != 0) return -1;
    }
    return 0;
}

cf_tokenizer *cf_bpe_load_gpt2_dir(const char *dir, cf_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    json_error_t jerr;
    json_t *vocab = json_load_file(path, 0, &jerr);
    if (!vocab || !json_is_object(vocab)) {
        json_decref(vocab);
        cf_fail(err, "%s: line %d: %s", path, jerr.line, vocab ? "not a JSON object" : jerr.text);
        return NULL;
    }
    int n = vocabulary_size(vocab, "token", NULL, path, err);
    if (n < 0) {
        json_decref(vocab);
        return NULL;
    }
    cf_tokenizer *t = cf_tok_new(CF_TOK_BYTE_LEVEL, n);
    int rc = load_vocab(t, vocab, path, err);
    json_decref(vocab);
    if (rc == 0) {
        snprintf(path, sizeof path, "%s/vocab.bpe", dir);
        size_t size;
        char *text = (char *)cf_read_file(path, &size, err);
        long line = 0;
        for (char *save, *l = text ? strtok_r(text, "\n", &save) : NULL; l && rc == 0; l = strtok_r(NULL, "\n", &save)) {
            line++;
            if (l[0] == '#') continue;
            char *space = strchr(l, ' ');
            if (!space) {
                rc = cf_fail(err, "%s: line %ld: expected two tokens", path, line);
                break;
            }
            *space = '\0';
            rc = add_spelled_merge(t, l, space + 1, path, line, err);
        }
        if (!text) rc = -1;
        free(text);
    }
    if (rc == 0) rc = cf_bpe_finish(t, dir, err);
    if (rc == 0) t->pretoken = cf_gpt2_pretoken;
    if (rc != 0) {
        cf_tokenizer_free(t);
        return NULL;
    }
    cf_bpe_find_specials(t);
    return t;
}

/* The pre-tokeniser of a tokenizer.json: ByteLevel with its own regex (GPT-2), or a
 * Sequence of a Split on the GPT-2 or LLaMA-3 pattern and a ByteLevel without regex.
 * Anything else would give different ids, so it is refused (NULL). */
static cf_pretoken_fn hf_pretokenizer(json_t *pre) {
    const char *type = json_string_value(json_object_get(pre, "type"));
    if (!type) return NULL;
    if (strcmp(type, "ByteLevel") == 0) return json_is_false(json_object_get(pre, "use_regex")) ? NULL : cf_gpt2_pretoken;
    json_t *steps = json_object_get(pre, "pretokenizers");
    if (strcmp(type, "Sequence") != 0) return NULL;
    if (json_array_size(steps) == 1) return hf_pretokenizer(json_array_get(steps, 0));
    json_t *split = json_array_get(steps, 0), *byte_level = json_array_get(steps, 1);
    const char *pattern = json_string_value(json_object_get(json_object_get(split, "pattern"), "Regex"));
    if (json_array_size(steps) != 2 || !pattern || !json_is_string(json_object_get(split, "type")) ||
        strcmp(json_string_value(json_object_get(split, "type")), "Split") != 0 ||
        !json_is_false(json_object_get(byte_level, "use_regex")))
        return NULL;
    if (strcmp(pattern, CF_LLAMA3_PATTERN) == 0) return cf_llama3_pretoken;
    if (strcmp(pattern, CF_GPT2_PATTERN) == 0) return cf_gpt2_pretoken;
    return NULL;
}

static int load_hf_merges(cf_tokenizer *t, json_t *merges, const char *path, cf_error *err) {
    for (size_t i = 0; i < json_array_size(merges); i++) {
        json_t *m = json_array_get(merges, i);
        int rc;
        if (json_is_string(m)) {
            char *pair = cf_xstrdup(json_string_value(m));
            char *space = strchr(pair, ' ');
            if (space) *space = '\0';
            rc = space ? add_spelled_merge(t, pair, space + 1, path, (long)i, err)
                       : cf_fail(err, "%s: merge %zu: expected \"left right\"", path, i);
            free(pair);
        } else {
            const char *a = json_string_value(json_array_get(m, 0)), *b = json_string_value(json_array_get(m, 1));
            rc = a && b ? add_spelled_merge(t, a, b, path, (long)i, err)
                        : cf_fail(err, "%s: merge %zu: expected a pair of strings", path, i);
        }
        if (rc != 0) return -1;
    }
    return 0;
}

cf_tokenizer *cf_bpe_load_hf_json(const char *path, const char *text, size_t size, cf_error *err) {
    json_error_t jerr;
    json_t *root = json_loadb(text, size, 0, &jerr);
    if (!root) {
        cf_fail(err, "%s: line %d: %s", path, jerr.line, jerr.text);
        return NULL;
    }
    json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(root, "added_tokens");
    const char *type = json_string_value(json_object_get(model, "type"));
    cf_tokenizer *t = NULL;
    if (!type || strcmp(type, "BPE") != 0 || !json_is_object(vocab)) {
        cf_fail(err, "%s: key model.type: only BPE models with a vocab are supported", path);
    } else if (json_object_get(root, "normalizer") && !json_is_null(json_object_get(root, "normalizer"))) {
        cf_fail(err, "%s: key normalizer: normalizers are not supported (byte-level models have none)", path);
    } else if (!hf_pretokenizer(json_object_get(root, "pre_tokenizer"))) {
        cf_fail(err, "%s: key pre_tokenizer: only ByteLevel, or a Split on the GPT-2 or LLaMA-3 pattern followed by "
                "ByteLevel, is supported", path);
    } else if (added && !json_is_array(added) && !json_is_null(added)) {
        cf_fail(err, "%s: key added_tokens: not an array", path);
    } else {
        int n = vocabulary_size(vocab, "model.vocab", added, path, err);
        t = n < 0 ? NULL : cf_tok_new(CF_TOK_BYTE_LEVEL, n);
        int rc = t ? load_vocab(t, vocab, path, err) : -1;
        for (size_t i = 0; rc == 0 && i < json_array_size(added); i++) {
            json_t *a = json_array_get(added, i);
            int id = (int)json_integer_value(json_object_get(a, "id"));
            rc = set_spelled(t, id, json_string_value(json_object_get(a, "content")), true, path, err);
            t->added_flags[id] = (uint8_t)((json_is_true(json_object_get(a, "lstrip")) ? CF_ADDED_LSTRIP : 0) |
                                           (json_is_true(json_object_get(a, "rstrip")) ? CF_ADDED_RSTRIP : 0) |
                                           (json_is_true(json_object_get(a, "single_word")) ? CF_ADDED_SINGLE_WORD : 0));
        }
        if (rc == 0) rc = load_hf_merges(t, json_object_get(model, "merges"), path, err);
        if (rc == 0) rc = cf_bpe_finish(t, path, err);
        if (rc != 0) {
            cf_tokenizer_free(t);
            t = NULL;
        } else {
            cf_bpe_find_specials(t);
            t->pretoken = hf_pretokenizer(json_object_get(root, "pre_tokenizer"));
            t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
        }
    }
    json_decref(root);
    return t;
}
