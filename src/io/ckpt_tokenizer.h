/* The tokenizer file embedded in a checkpoint (metadata "tokenizer": {"tensor": ...}). */
#ifndef CFORMERS_IO_CKPT_TOKENIZER_H
#define CFORMERS_IO_CKPT_TOKENIZER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "cformers/checkpoint.h"
#include "cformers/tokenizer.h"

/* A tokenizer file's bytes and its name (no directory; the name tells llama2.c's .bin
 * format apart), as a checkpoint embeds it. Empty (bytes NULL) when there is none. */
typedef struct ckpt_tok_file {
    char name[256];
    unsigned char *bytes;
    size_t len;
    /* The model's chat template (Jinja source, malloc'd), or NULL: it travels with the
     * tokenizer, in the checkpoint's metadata "tokenizer": {"chat_template": ...}. */
    char *chat_template;
} ckpt_tok_file;

/* Loads it; NULL with *present = false when the checkpoint has none, NULL with
 * *present = true and err set when it is there but unreadable. */
cf_tokenizer *cf_ckpt_load_tokenizer(cf_ckpt *c, bool *present, cf_error *err);

/* The checkpoint's chat template (malloc'd Jinja source), or NULL when it has none. */
char *cf_ckpt_chat_template(cf_ckpt *c);

/* The embedded file's bytes and name, copied into *f; f stays empty when the checkpoint has
 * none. Fails (-1) when the entry is there but its tensor is not. */
int cf_ckpt_tok_file_from_ckpt(cf_ckpt *c, ckpt_tok_file *f, cf_error *err);
/* Reads the tokenizer at `path` after checking that it loads. GPT-2's directory
 * (encoder.json + vocab.bpe) is not one file: it becomes a tokenizer.json. The chat
 * template comes from beside it, as transformers reads it: chat_template.jinja, else
 * tokenizer_config.json's "chat_template" (a string, or a list of {name, template} of
 * which "default" is taken). */
int cf_ckpt_tok_file_read(const char *path, ckpt_tok_file *f, cf_error *err);
/* A loaded tokenizer as the file checkpoints embed: SentencePiece as tokenizer.model,
 * byte-level BPE as tokenizer.json; checked to load back to the same vocabulary and
 * specials, else -1 with err naming `source`. */
int cf_ckpt_tok_file_convert(const cf_tokenizer *tok, const char *source, ckpt_tok_file *f, cf_error *err);
/* The byte vocabulary's tokenizer.json (cf_tokenizer_bytes_json). */
void cf_ckpt_tok_file_bytes(ckpt_tok_file *f);
/* The tokenizer the file holds; NULL with err set when it does not load. */
cf_tokenizer *cf_ckpt_tok_file_load(const ckpt_tok_file *f, cf_error *err);
void cf_ckpt_tok_file_free(ckpt_tok_file *f);
/* The chat template of the Hugging Face directory `dir` (see cf_ckpt_tok_file_read) into
 * *out (malloc'd; NULL when there is none); -1 when a file is there but unreadable. */
int cf_ckpt_read_chat_template(const char *dir, char **out, cf_error *err);

/* Writes the file's bytes as the i8 tensor "tokenizer.file" and records it in `meta`, so
 * the checkpoint alone is enough to generate. Does nothing for an empty f. */
int cf_ckpt_embed_tok_file(cf_ckpt_writer *w, const ckpt_tok_file *f, json_t *meta, cf_error *err);
/* The same for the tokenizer at `path` (cf_ckpt_tok_file_read). */
int cf_ckpt_embed_tokenizer(cf_ckpt_writer *w, const char *path, json_t *meta, cf_error *err);

#endif
