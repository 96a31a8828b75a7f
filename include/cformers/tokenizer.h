/* Tokenizers: text <-> token ids, in C, with no Python at run time.
 *
 * One handle type covers every supported format; cf_tokenizer_load() recognises the
 * file by its content:
 *   - SentencePiece BPE model (`tokenizer.model`, LLaMA 2 family, with byte fallback)
 *   - llama2.c `tokenizer.bin` (same algorithm as SentencePiece BPE: scores + byte fallback)
 *   - GPT-2 byte-level BPE: a directory holding `encoder.json` + `vocab.bpe`
 *   - Hugging Face `tokenizer.json` (byte-level BPE, LLaMA-3 / GPT-2 style)
 *   - a vocabulary written by `cformers tokenizer train`
 *   - the byte vocabulary (cf_tokenizer_bytes_json): 256 tokens, id = byte, no merges
 * cf_tokenizer_bytes() gives that byte vocabulary. */
#ifndef CFORMERS_TOKENIZER_H
#define CFORMERS_TOKENIZER_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_tokenizer cf_tokenizer;

cf_tokenizer *cf_tokenizer_load(const char *path, cf_error *err);
/* The same from a file's bytes (any format but the GPT-2 directory); `name` stands for
 * the file in error messages, and a name ending in ".bin" marks llama2.c's format. */
cf_tokenizer *cf_tokenizer_load_memory(const char *name, const void *bytes, size_t size, cf_error *err);
/* The vocabulary of a model trained on raw text: token id b is byte b. It is a
 * tokenizer.json (ByteLevel, no merges) that Hugging Face loads too, so checkpoints embed
 * it like any other tokenizer file; cf_tokenizer_bytes_json returns that file's text
 * (malloc'd, NUL-terminated, length in *len). */
#define CF_TOKENIZER_BYTES_NAME "bytes.tokenizer.json"
cf_tokenizer *cf_tokenizer_bytes(void);
char *cf_tokenizer_bytes_json(size_t *len);
void cf_tokenizer_free(cf_tokenizer *tok);

int cf_tokenizer_vocab_size(const cf_tokenizer *tok);
/* Token `id`'s text as the vocabulary spells it (SentencePiece pieces keep U+2581,
 * special tokens their name, e.g. "<s>", also where llama2.c wrote "\n<s>\n"), not
 * NUL-terminated; "" for an id out of range. */
const char *cf_tokenizer_token(const cf_tokenizer *tok, int32_t id, size_t *len);
/* The algorithm: "sentencepiece-bpe" (score-ordered merges, byte fallback) or
 * "byte-level-bpe" (GPT-2 style; the byte vocabulary is one with no merges). */
const char *cf_tokenizer_type(const cf_tokenizer *tok);
/* Special ids, or -1 when the vocabulary has none. */
int cf_tokenizer_bos(const cf_tokenizer *tok);
int cf_tokenizer_eos(const cf_tokenizer *tok);

/* Encodes `len` bytes of text. On success returns the number of ids and sets *ids to a
 * malloc'd array the caller frees; returns -1 with err set on failure. With add_bos, the
 * BOS id (if the vocabulary has one) is prepended. */
long cf_tokenizer_encode(const cf_tokenizer *tok, const char *text, size_t len, bool add_bos, int32_t **ids,
                         cf_error *err);
/* As cf_tokenizer_encode, but added and special tokens written in the text ("<|eot_id|>",
 * "<|im_start|>", "<s>", a control "[INST]") become their single ids, longest match first,
 * honouring tokenizer.json's lstrip/rstrip/single_word; the text between them is encoded
 * as cf_tokenizer_encode would. Hugging Face's tokenizer(text) and llama.cpp's
 * parse_special do the same. Used for prompts; training data keeps cf_tokenizer_encode. */
long cf_tokenizer_encode_special(const cf_tokenizer *tok, const char *text, size_t len, bool add_bos,
                                 int32_t **ids, cf_error *err);

/* The bytes of one token as they should be printed after token `prev` (-1 at the start),
 * for streaming output: SentencePiece drops the leading space after BOS, byte-fallback
 * tokens become their raw byte. Returns a pointer into the tokenizer or into `scratch`
 * (at least 8 bytes), and the length in *len. */
const char *cf_tokenizer_piece(const cf_tokenizer *tok, int32_t prev, int32_t id, char *scratch, size_t *len);

/* A 64-bit fingerprint of the vocabulary (token bytes and order), stored in record
 * shards so data made with one tokenizer is not trained with another. */
uint64_t cf_tokenizer_fingerprint(const cf_tokenizer *tok);

/* A SentencePiece BPE tokenizer (from a .model or llama2.c's .bin) as the bytes of a
 * SentencePiece `tokenizer.model` (malloc'd, length in *len) that loads back to the same
 * ids, and that Hugging Face and the sentencepiece library load; NULL for a byte-level
 * tokenizer (whose file is a tokenizer.json already). */
unsigned char *cf_tokenizer_to_sp_model(const cf_tokenizer *tok, size_t *len);

/* A byte-level BPE tokenizer (GPT-2's encoder.json + vocab.bpe, a tokenizer.json) as the
 * text of a Hugging Face tokenizer.json (malloc'd, NUL-terminated, length in *len) that
 * loads back to the same ids; NULL for a SentencePiece one (cf_tokenizer_to_sp_model). */
char *cf_tokenizer_to_hf_json(const cf_tokenizer *tok, size_t *len);

/* Decodes a whole sequence into a malloc'd, NUL-terminated string. */
char *cf_tokenizer_decode(const cf_tokenizer *tok, const int32_t *ids, size_t n);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
