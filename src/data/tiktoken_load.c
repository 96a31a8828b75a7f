/* Meta's Llama 3 tokenizer.model, in tiktoken's format: one "base64(token bytes) rank" line
 * per token, ranks 0.. in order. The file holds neither the split pattern nor the special
 * tokens: they are those of Meta's llama_models/llama3/tokenizer.py (LLaMA-3's pattern, 256
 * special tokens after the ranks), so only a file of Llama 3's 128,000 ranks is accepted.
 * tiktoken merges the adjacent pair whose joined token has the lowest rank; that is BPE with
 * the merges (left, right) of every token ordered by the token's rank (as transformers'
 * TikTokenConverter writes them), which is what this loader builds, so the tokenizer exports
 * to tokenizer.json and GGUF like any byte-level one. */
#include <stdlib.h>
#include <string.h>

#include "data/pretokenize.h"
#include "data/tokenizer_internal.h"

enum { LLAMA3_RANKS = 128000, LLAMA3_SPECIALS = 256 };

static const char *const LLAMA3_NAMED[] = {
    "<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>",
    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>", "<|image|>",
};

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

bool cf_tiktoken_sniff(const unsigned char *data, size_t size) {
    size_t i = 0;
    while (i < size && (b64_value(data[i]) >= 0 || data[i] == '=')) i++;
    if (i == 0 || i == size || data[i] != ' ') return false;
    size_t digits = ++i;
    while (i < size && data[i] >= '0' && data[i] <= '9') i++;
    return i > digits && i < size && data[i] == '\n';
}

/* Decodes n base64 characters into out (room for 3 * n / 4 bytes); returns the length or -1. */
static long b64_decode(const char *s, size_t n, char *out) {
    if (n % 4) return -1;
    long len = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            v[k] = c == '=' && k >= 2 && i + 4 == n ? (pad++, 0) : b64_value(c);
            if (v[k] < 0 || (pad && c != '=')) return -1;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[len++] = (char)(w >> 16);
        if (pad < 2) out[len++] = (char)(w >> 8);
        if (pad < 1) out[len++] = (char)w;
    }
    return len;
}

/* Sets the ranks' tokens from the lines of text; 0, or -1 with err naming the line. */
static int read_ranks(cf_tokenizer *t, const char *path, const char *text, size_t size, cf_error *err) {
    const char *p = text, *end = text + size;
    for (int rank = 0; rank < LLAMA3_RANKS; rank++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *space = nl ? memchr(p, ' ', (size_t)(nl - p)) : NULL;
        char raw[256];
        long n = space && (size_t)(space - p) <= 4 * sizeof raw / 3 ? b64_decode(p, (size_t)(space - p), raw) : -1;
        char *rank_end;
        long r = space ? strtol(space + 1, &rank_end, 10) : -1;
        if (n <= 0 || r != rank || rank_end != nl)
            return cf_fail(err, "%s: line %d: expected \"base64(token) %d\"", path, rank + 1, rank);
        if (cf_strmap_get(&t->piece_ids, raw, (size_t)n) >= 0)
            return cf_fail(err, "%s: line %d: token repeated", path, rank + 1);
        cf_tok_set_piece(t, rank, raw, (size_t)n);
        t->types[rank] = SP_NORMAL;
        cf_strmap_put(&t->piece_ids, t->pieces[rank], (size_t)n, rank);
        if (n == 1) t->byte_ids[(unsigned char)raw[0]] = rank;
        p = nl + 1;
    }
    return 0;
}

typedef struct split {
    int32_t left, right;
} split;

static int by_ranks(const void *a, const void *b) {
    const split *x = a, *y = b;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return (x->right > y->right) - (x->right < y->right);
}

/* Every token's splits into two tokens, tokens in rank order, a token's splits by the
 * ranks of their halves. */
static int derive_merges(cf_tokenizer *t, const char *path, cf_error *err) {
    split *splits = cf_xmalloc(256 * sizeof *splits);
    int rc = 0;
    for (int32_t id = 0; rc == 0 && id < LLAMA3_RANKS; id++) {
        const char *s = t->pieces[id];
        uint32_t len = t->piece_len[id];
        size_t n = 0;
        for (uint32_t k = 1; k < len; k++) {
            int32_t l = cf_strmap_get(&t->piece_ids, s, k), r = cf_strmap_get(&t->piece_ids, s + k, len - k);
            if (l >= 0 && r >= 0) splits[n++] = (split){l, r};
        }
        qsort(splits, n, sizeof *splits, by_ranks);
        for (size_t k = 0; rc == 0 && k < n; k++) rc = cf_bpe_add_merge(t, splits[k].left, splits[k].right, err);
    }
    free(splits);
    return rc ? cf_fail_prefix(err, "%s: ", path) : 0;
}

cf_tokenizer *cf_tiktoken_load(const char *path, const char *text, size_t size, cf_error *err) {
    size_t lines = 0;
    for (const char *p = text; (p = memchr(p, '\n', (size_t)(text + size - p))); p++) lines++;
    if (lines != LLAMA3_RANKS || text[size - 1] != '\n') {
        cf_fail(err, "%s: a tiktoken file of %zu lines: only Meta's Llama 3 tokenizer.model (%d ranks) is known, as "
                "the file does not give its split pattern and special tokens",
                path, lines, LLAMA3_RANKS);
        return NULL;
    }
    cf_tokenizer *t = cf_tok_new(CF_TOK_BYTE_LEVEL, LLAMA3_RANKS + LLAMA3_SPECIALS);
    int rc = read_ranks(t, path, text, size, err);
    for (int k = 0; rc == 0 && k < LLAMA3_SPECIALS; k++) {
        char name[40];
        int n = (size_t)k < sizeof LLAMA3_NAMED / sizeof LLAMA3_NAMED[0]
                    ? snprintf(name, sizeof name, "%s", LLAMA3_NAMED[k])
                    : snprintf(name, sizeof name, "<|reserved_special_token_%d|>",
                               k + 2 - (int)(sizeof LLAMA3_NAMED / sizeof LLAMA3_NAMED[0]));
        cf_tok_set_piece(t, LLAMA3_RANKS + k, name, (size_t)n);
        t->types[LLAMA3_RANKS + k] = SP_CONTROL;
    }
    if (rc == 0) rc = derive_merges(t, path, err);
    if (rc == 0) rc = cf_bpe_finish(t, path, err);
    if (rc != 0) {
        cf_tokenizer_free(t);
        return NULL;
    }
    cf_bpe_find_specials(t);
    t->pretoken = cf_llama3_pretoken;
    t->ignore_merges = true;
    return t;
}
