/* Writes record shards: token chunks as they fill, then the index and the header. Each
 * shard is written under <name>.tmp and renamed into place when the writer closes. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

#include "cformers/checkpoint.h"
#include "cformers/records.h"
#include "core/fault.h"
#include "data/record_format.h"
#include "io/atomic_file.h"

struct cf_record_writer {
    char *dir, *split;
    cf_record_options opt;
    int token_bytes;
    FILE *f;
    char path[4096];
    uint64_t offset; /* bytes written to the current shard */
    cf_record_chunk *chunks;
    size_t n_chunks, cap_chunks;
    uint64_t *doc_offsets;
    size_t n_docs, cap_docs;
    uint64_t shard_tokens;
    unsigned char *chunk; /* raw tokens of the chunk being filled */
    uint32_t chunk_fill;
    void *zbuf;
    size_t zcap;
    char **written; /* temporary paths of finished shards, renamed at close */
    int n_written;
    bool failed; /* an add failed: close discards everything */
};

static int write_bytes(cf_record_writer *w, const void *p, size_t n, cf_error *err) {
    if (n && cf_fwrite(p, n, w->f) != n) return w->failed = true, cf_fail(err, "%s: write failed at offset %llu: %s", w->path,
                                                      (unsigned long long)w->offset, strerror(errno));
    w->offset += n;
    return 0;
}

static int start_shard(cf_record_writer *w, cf_error *err) {
    snprintf(w->path, sizeof w->path, "%s/%s-%05d%s.tmp", w->dir, w->split, w->n_written, CF_RECORD_SUFFIX);
    w->f = fopen(w->path, "wb");
    if (!w->f) return cf_fail(err, "%s: %s", w->path, strerror(errno));
    w->offset = 0;
    w->n_chunks = 0;
    w->n_docs = 0;
    w->shard_tokens = 0;
    w->doc_offsets[0] = 0;
    cf_record_header blank;
    memset(&blank, 0, sizeof blank);
    return write_bytes(w, &blank, sizeof blank, err); /* filled in when the shard ends */
}

static int flush_chunk(cf_record_writer *w, cf_error *err) {
    if (w->chunk_fill == 0) return 0;
    size_t raw = (size_t)w->chunk_fill * (size_t)w->token_bytes;
    const void *stored = w->chunk;
    size_t stored_bytes = raw;
    if (w->opt.zstd) {
        size_t bound = ZSTD_compressBound(raw);
        if (bound > w->zcap) {
            w->zcap = bound;
            w->zbuf = cf_xrealloc(w->zbuf, bound);
        }
        stored_bytes = ZSTD_compress(w->zbuf, w->zcap, w->chunk, raw, w->opt.zstd_level);
        if (ZSTD_isError(stored_bytes)) return w->failed = true, cf_fail(err, "%s: zstd: %s", w->path, ZSTD_getErrorName(stored_bytes));
        stored = w->zbuf;
    }
    if (w->n_chunks == w->cap_chunks) {
        w->cap_chunks = w->cap_chunks * 2 + 8;
        w->chunks = cf_xrealloc(w->chunks, w->cap_chunks * sizeof *w->chunks);
    }
    w->chunks[w->n_chunks++] = (cf_record_chunk){.offset = w->offset, .stored_bytes = (uint32_t)stored_bytes,
                                                 .n_tokens = w->chunk_fill, .crc = cf_crc32c(0, stored, stored_bytes)};
    w->chunk_fill = 0;
    return write_bytes(w, stored, stored_bytes, err);
}

static int end_shard(cf_record_writer *w, cf_error *err) {
    if (flush_chunk(w, err) != 0) return -1;
    cf_record_header h = {.version = CF_RECORD_VERSION, .token_bytes = (uint32_t)w->token_bytes,
                          .vocab_size = (uint32_t)w->opt.vocab_size, .eos_id = w->opt.eos_id,
                          .flags = w->opt.zstd ? CF_RECORD_FLAG_ZSTD : 0, .n_chunks = (uint32_t)w->n_chunks,
                          .n_docs = w->n_docs, .n_tokens = w->shard_tokens,
                          .tokenizer_hash = w->opt.tokenizer_hash};
    memcpy(h.magic, CF_RECORD_MAGIC, 8);
    uint32_t crc = cf_crc32c(0, w->chunks, w->n_chunks * sizeof *w->chunks);
    crc = cf_crc32c(crc, w->doc_offsets, (w->n_docs + 1) * 8);
    static const char zeros[8] = {0};
    if (write_bytes(w, zeros, cf_record_index_padding(w->offset), err) != 0) return -1;
    h.index_offset = w->offset;
    h.header_crc = cf_crc32c(0, &h, offsetof(cf_record_header, header_crc));
    if (write_bytes(w, w->chunks, w->n_chunks * sizeof *w->chunks, err) != 0 ||
        write_bytes(w, w->doc_offsets, (w->n_docs + 1) * 8, err) != 0 || write_bytes(w, &crc, 4, err) != 0)
        return -1;
    bool ok = fseek(w->f, 0, SEEK_SET) == 0 && cf_fwrite(&h, sizeof h, w->f) == sizeof h && fflush(w->f) == 0 &&
              fsync(fileno(w->f)) == 0; /* on disk before the rename makes it a shard */
    int error = errno;
    if (fclose(w->f) != 0 && ok) ok = false, error = errno;
    w->f = NULL;
    if (!ok) {
        remove(w->path);
        return w->failed = true, cf_fail(err, "%s: cannot finish the shard: %s", w->path, strerror(error));
    }
    w->written = cf_xrealloc(w->written, (size_t)(w->n_written + 1) * sizeof *w->written);
    w->written[w->n_written++] = cf_xstrdup(w->path);
    return 0;
}

cf_record_writer *cf_record_writer_open(const char *dir, const char *split, const cf_record_options *opt,
                                        cf_error *err) {
    if (opt->vocab_size <= 0 || opt->eos_id < 0 || opt->eos_id >= opt->vocab_size) {
        cf_fail(err, "%s: record writer needs a vocabulary size and an EOS id inside it (got %d, %d)", dir,
                opt->vocab_size, opt->eos_id);
        return NULL;
    }
    cf_record_writer *w = cf_xcalloc(1, sizeof *w);
    w->dir = cf_xstrdup(dir);
    w->split = cf_xstrdup(split);
    w->opt = *opt;
    if (!w->opt.chunk_tokens) w->opt.chunk_tokens = 1u << 20;
    if (!w->opt.zstd_level) w->opt.zstd_level = ZSTD_CLEVEL_DEFAULT;
    w->token_bytes = opt->vocab_size <= 65536 ? 2 : 4;
    w->chunk = cf_xmalloc((size_t)w->opt.chunk_tokens * (size_t)w->token_bytes);
    w->cap_docs = 1024;
    w->doc_offsets = cf_xmalloc((w->cap_docs + 1) * 8);
    return w;
}

int cf_record_writer_add(cf_record_writer *w, const int32_t *ids, size_t n, cf_error *err) {
    if (w->failed) return cf_fail(err, "%s: writer already failed", w->path);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= w->opt.vocab_size)
            return w->failed = true,
                   cf_fail(err, "%s/%s: token id %d outside the vocabulary of %d", w->dir, w->split, ids[i],
                           w->opt.vocab_size);
    if (w->f && w->opt.shard_tokens && w->shard_tokens >= w->opt.shard_tokens && end_shard(w, err) != 0) return -1;
    if (!w->f && start_shard(w, err) != 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (w->token_bytes == 2) {
            uint16_t v = (uint16_t)ids[i];
            memcpy(w->chunk + (size_t)w->chunk_fill * 2, &v, 2);
        } else {
            memcpy(w->chunk + (size_t)w->chunk_fill * 4, &ids[i], 4);
        }
        if (++w->chunk_fill == w->opt.chunk_tokens && flush_chunk(w, err) != 0) return -1;
    }
    w->shard_tokens += n;
    if (w->n_docs == w->cap_docs) {
        w->cap_docs *= 2;
        w->doc_offsets = cf_xrealloc(w->doc_offsets, (w->cap_docs + 1) * 8);
    }
    w->doc_offsets[++w->n_docs] = w->shard_tokens;
    return 0;
}

int cf_record_writer_close(cf_record_writer *w, int *n_shards, cf_error *err) {
    int rc = w->failed ? -1 : w->f ? end_shard(w, err) : 0;
    if (w->f) { /* the last shard could not be finished */
        fclose(w->f);
        remove(w->path);
    }
    for (int i = 0; i < w->n_written; i++) {
        char final_path[4096];
        snprintf(final_path, sizeof final_path, "%s", w->written[i]);
        final_path[strlen(final_path) - 4] = '\0'; /* drop ".tmp" */
        if (rc == 0 && rename(w->written[i], final_path) != 0)
            rc = cf_fail(err, "%s: cannot rename into place: %s", final_path, strerror(errno));
        if (rc != 0) remove(w->written[i]);
        free(w->written[i]);
    }
    if (rc == 0 && w->n_written > 0) {
        char entry[4096];
        snprintf(entry, sizeof entry, "%s/.", w->dir); /* its directory is w->dir */
        cf_atomic_file_sync_dir(entry);
    }
    if (n_shards) *n_shards = rc == 0 ? w->n_written : 0;
    free(w->written);
    free(w->chunks);
    free(w->doc_offsets);
    free(w->chunk);
    free(w->zbuf);
    free(w->dir);
    free(w->split);
    free(w);
    return rc;
}

void cf_record_writer_discard(cf_record_writer *w) {
    w->failed = true;
    cf_record_writer_close(w, NULL, NULL);
}
