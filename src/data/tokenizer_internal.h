/* The tokenizer handle behind include/cformers/tokenizer.h, shared by the loaders
 * (SentencePiece .model, llama2.c .bin, GPT-2 files, tokenizer.json) and the encoders. */
#ifndef CFORMERS_DATA_TOKENIZER_INTERNAL_H
#define CFORMERS_DATA_TOKENIZER_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "cformers/tokenizer.h"
#include "data/bpe_cache.h"
#include "data/pretokenize.h"
#include "data/strmap.h"

typedef enum cf_tok_kind {
    CF_TOK_SENTENCEPIECE, /* BPE by piece score on normalised text, byte fallback */
    CF_TOK_BYTE_LEVEL,    /* GPT-2 style: regex pre-tokenisation, BPE by merge rank */
} cf_tok_kind;

/* SentencePiece piece types (sentencepiece_model.proto numbering). */
enum { SP_NORMAL = 1, SP_UNKNOWN = 2, SP_CONTROL = 3, SP_USER_DEFINED = 4, SP_UNUSED = 5, SP_BYTE = 6 };

struct cf_tokenizer {
    cf_tok_kind kind;
    int vocab_size;
    char **pieces;       /* token text: SentencePiece pieces keep their U+2581; byte-level
                            tokens hold their raw bytes */
    uint32_t *piece_len;
    char **text;         /* the bytes a token decodes to (U+2581 -> space, byte tokens -> the byte) */
    uint32_t *text_len;
    float *scores;       /* SentencePiece merge priority (higher merges first) */
    uint8_t *types;      /* SP_* per token */
    cf_strmap piece_ids; /* mergeable pieces (SentencePiece) or all tokens (byte-level) -> id */
    int bos, eos, unk;
    int byte_ids[256];   /* id of the token for each single byte, -1 when none */

    /* SentencePiece normaliser (identity rules only). */
    bool add_dummy_prefix, remove_extra_whitespaces, escape_whitespaces, byte_fallback;

    /* Byte-level BPE: (left id, right id) -> rank; merge_result[rank] is the merged id. */
    cf_strmap merges;
    int32_t *merge_result;
    int n_merges;
    cf_bpe_cache *cache; /* word -> ids, shared by concurrent encoders */
    cf_pretoken_fn pretoken; /* GPT-2 or LLaMA-3 splitting */
    bool ignore_merges;  /* a word that is itself a token skips merging (LLaMA-3) */

    /* Added/special tokens matched in text by cf_tokenizer_encode_special: control and
     * user-defined tokens, longest first (cf_tok_finish builds it from types and added_flags). */
    uint8_t *added_flags;     /* per id: CF_ADDED_* from tokenizer.json's added_tokens */
    struct cf_tok_added *added;
    int n_added;
    bool added_first[256];    /* bytes an added token starts with */
};

/* tokenizer.json added_tokens flags: lstrip/rstrip take the whitespace on that side into
 * the token; single_word matches only between non-word characters. */
enum { CF_ADDED_LSTRIP = 1, CF_ADDED_RSTRIP = 2, CF_ADDED_SINGLE_WORD = 4 };
typedef struct cf_tok_added {
    const char *s; /* the text matched (into pieces[id]) */
    uint32_t len;
    int32_t id;
    uint8_t flags;
} cf_tok_added;

/* Allocates the per-token arrays for n tokens, all empty; byte_ids and specials -1. */
cf_tokenizer *cf_tok_new(cf_tok_kind kind, int n);
/* Sets token id's text (copied). */
void cf_tok_set_piece(cf_tokenizer *t, int id, const char *text, size_t len);

/* Token text from a file, made fit for a one-line error message: at most 40 bytes, with
 * control bytes, '"' and '\\' shown as '?' and "..." when cut. Returns out. */
enum { CF_TOK_QUOTE_SIZE = 48 };
const char *cf_tok_quote(const char *s, size_t len, char out[CF_TOK_QUOTE_SIZE]);

/* Derives the decoded text of every token; loaders call it last. */
void cf_tok_finish(cf_tokenizer *t);

/* Loaders, each for one file format; `data` is the whole file. */
cf_tokenizer *cf_sp_load_model(const char *path, const unsigned char *data, size_t size, cf_error *err);
cf_tokenizer *cf_sp_load_llama2c(const char *path, const unsigned char *data, size_t size, cf_error *err);
cf_tokenizer *cf_bpe_load_gpt2_dir(const char *dir, cf_error *err);
/* Meta's Llama 3 tokenizer.model: tiktoken's "base64(token) rank" lines (tiktoken_load.c). */
cf_tokenizer *cf_tiktoken_load(const char *path, const char *text, size_t size, cf_error *err);
/* True when the file starts as a tiktoken file does. */
bool cf_tiktoken_sniff(const unsigned char *data, size_t size);
/* Byte-level loaders' last steps: every byte has a token and every id a text, then the
 * cache and decoded texts (0, or -1 with err naming path); BOS/EOS found by their names. */
int cf_bpe_finish(cf_tokenizer *t, const char *path, cf_error *err);
void cf_bpe_find_specials(cf_tokenizer *t);
cf_tokenizer *cf_bpe_load_hf_json(const char *path, const char *text, size_t size, cf_error *err);
/* GPT-2's byte -> code point table, used to spell byte-level tokens in JSON files. */
void cf_bpe_byte_to_unicode(uint32_t table[256]);
/* Spells raw token bytes as GPT-2's vocabularies do (each byte as its bytes_to_unicode
 * character, UTF-8): out has room for 2 * len + 1; returns the length written (NUL after). */
size_t cf_bpe_spell(const char *raw, size_t len, char *out);
/* tokenizer.json's root for a byte-level BPE model (bpe_write.c): vocab (spelled token ->
 * id), added_tokens and merges as given (references stolen), the pre-tokeniser and decoder
 * that give `pre`'s splitting (GPT-2's or LLaMA-3's), no normaliser. */
json_t *cf_bpe_json_root(json_t *vocab, json_t *added, json_t *merges, cf_pretoken_fn pre, bool ignore_merges);
/* The merges by rank as (left id, right id): malloc'd, t->n_merges entries. */
int32_t (*cf_bpe_merge_pairs(const cf_tokenizer *t))[2];
/* Sets up merge tables once pieces and the (left, right) merge list are known. */
int cf_bpe_add_merge(cf_tokenizer *t, int32_t left, int32_t right, cf_error *err);

/* Encoders; append to *ids (capacity *cap, grown as needed) and return the new count. */
size_t cf_sp_encode(const cf_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t n, size_t *cap);
size_t cf_bpe_encode(const cf_tokenizer *t, const char *text, size_t len, int32_t **ids, size_t n, size_t *cap);

/* Appends one id, growing the array. */
static inline size_t cf_ids_push(int32_t **ids, size_t n, size_t *cap, int32_t id) {
    if (n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *ids = cf_xrealloc(*ids, *cap * sizeof **ids);
    }
    (*ids)[n] = id;
    return n + 1;
}

#endif
