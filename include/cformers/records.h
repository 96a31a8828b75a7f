/* Token record shards: the binary files `cformers preprocess` writes and the loader
 * (dataset.h) reads. The byte layout is in docs/record-format.md.
 *
 * A shard holds whole documents as token ids (u16 when the vocabulary fits, else u32),
 * cut into checksummed chunks (CRC32C, optionally zstd-compressed), plus an index of
 * document boundaries. A split ("train", "valid") is the files DIR/<split>-NNNNN.cfrec. */
#ifndef CFORMERS_RECORDS_H
#define CFORMERS_RECORDS_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CF_RECORD_VERSION 1

typedef struct cf_record_options {
    int vocab_size;           /* ids must lie in [0, vocab_size) */
    int eos_id;               /* separator the loader packs between documents */
    uint64_t tokenizer_hash;  /* fingerprint of the tokenizer (cf_tokenizer_fingerprint) */
    bool zstd;                /* compress chunks with zstd */
    int zstd_level;           /* 0: zstd's default */
    uint64_t shard_tokens;    /* start a new shard after this many tokens (0: one shard) */
    uint32_t chunk_tokens;    /* tokens per checksummed chunk (0: 1 Mi) */
} cf_record_options;

/* ---- writing ---- */

typedef struct cf_record_writer cf_record_writer;

/* Starts writing DIR/<split>-00000.cfrec (under a temporary name until closed). */
cf_record_writer *cf_record_writer_open(const char *dir, const char *split, const cf_record_options *opt,
                                        cf_error *err);
/* Appends one document. */
int cf_record_writer_add(cf_record_writer *w, const int32_t *ids, size_t n, cf_error *err);
/* Finishes the last shard, renames the files into place and frees the writer (also on
 * failure). Reports how many shards were written. */
int cf_record_writer_close(cf_record_writer *w, int *n_shards, cf_error *err);
/* Deletes everything written so far and frees the writer. */
void cf_record_writer_discard(cf_record_writer *w);

/* ---- reading ---- */

typedef struct cf_record_shard {
    char *path;
    int token_bytes; /* 2 or 4 */
    int vocab_size, eos_id;
    uint64_t tokenizer_hash;
    uint64_t n_docs, n_tokens;
    const uint64_t *doc_offsets; /* n_docs + 1 token offsets; document d is [off[d], off[d+1]) */
    const void *tokens;          /* n_tokens ids of token_bytes each, little-endian */
    void *map;                   /* internal: the mapped file and decompressed copy */
    size_t map_size;
    void *owned;
} cf_record_shard;

/* Maps a shard and verifies its header, every chunk checksum and the index. Errors name
 * the file and byte offset (truncated file, bad magic, version, checksum, bad token id). */
int cf_record_shard_open(cf_record_shard *s, const char *path, cf_error *err);
void cf_record_shard_close(cf_record_shard *s);

/* Copies n ids starting at token `first` into out as int32. */
void cf_record_shard_read(const cf_record_shard *s, uint64_t first, size_t n, int32_t *out);

/* Lists DIR/<split>-*.cfrec in name order; *paths is malloc'd (free each and the array). */
int cf_record_list(const char *dir, const char *split, char ***paths, int *n, cf_error *err);

/* Deletes the train and valid shards in DIR, then DIR itself if that leaves it empty. */
void cf_record_remove(const char *dir);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
