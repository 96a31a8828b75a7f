/* Reads and verifies record shards. Uncompressed token data is used in place from the
 * mapped file; zstd chunks are decompressed once into one buffer. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "cformers/checkpoint.h"
#include "cformers/records.h"
#include "data/record_format.h"

/* Fails naming the file and the byte offset at fault; closes the shard. */
__attribute__((format(printf, 4, 5))) static int fail(cf_record_shard *s, cf_error *err, uint64_t off, const char *fmt,
                                                      ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    cf_fail(err, "%s: offset %llu: %s", s->path, (unsigned long long)off, what);
    cf_record_shard_close(s);
    return -1;
}

/* Refuses a header whose counts and offsets cannot describe a file of `size` bytes, before
 * any of them forms a pointer or sizes an allocation. */
static int check_header(cf_record_shard *s, const cf_record_header *h, size_t size, cf_error *err) {
    if (size < sizeof *h) return fail(s, err, size, "truncated: file shorter than the record header");
    if (memcmp(h->magic, CF_RECORD_MAGIC, 8) != 0) return fail(s, err, 0, "not a cformers record shard (bad magic)");
    if (h->header_crc != cf_crc32c(0, h, offsetof(cf_record_header, header_crc)))
        return fail(s, err, offsetof(cf_record_header, header_crc), "header checksum mismatch");
    if (h->version != CF_RECORD_VERSION)
        return fail(s, err, offsetof(cf_record_header, version), "record format version %u, this build reads version %d",
                    h->version, CF_RECORD_VERSION);
    if ((h->token_bytes != 2 && h->token_bytes != 4) || h->vocab_size == 0 || h->eos_id < 0 ||
        (uint32_t)h->eos_id >= h->vocab_size)
        return fail(s, err, offsetof(cf_record_header, token_bytes), "bad token width, vocabulary size or EOS id");
    if (h->index_offset < sizeof *h || h->index_offset % 8 != 0)
        return fail(s, err, offsetof(cf_record_header, index_offset),
                    "header index_offset %llu: the index must start at a multiple of 8 after the header",
                    (unsigned long long)h->index_offset);
    size_t index_bytes;
    if (!cf_record_index_bytes(h->n_chunks, h->n_docs, &index_bytes) || !cf_fits(h->index_offset, index_bytes, size) ||
        size - h->index_offset != index_bytes)
        return fail(s, err, offsetof(cf_record_header, n_chunks),
                    "truncated or oversized: an index of n_chunks %u and n_docs %llu at index_offset %llu does not end "
                    "at the end of the file (%zu bytes)",
                    h->n_chunks, (unsigned long long)h->n_docs, (unsigned long long)h->index_offset, size);
    return 0;
}

/* Checks the chunk entries against the data area, their token counts against what their
 * stored bytes can hold and their sum against the header, all before the token count sizes
 * the zstd buffer; then every chunk's checksum, decompressing zstd chunks. */
static int check_chunks(cf_record_shard *s, const cf_record_header *h, const unsigned char *base, cf_error *err) {
    const cf_record_chunk *chunks = (const cf_record_chunk *)(base + h->index_offset); /* 8-aligned: check_header */
    uint64_t tokens = 0, end = sizeof *h;
    bool zstd = h->flags & CF_RECORD_FLAG_ZSTD;
    for (uint32_t c = 0; c < h->n_chunks; c++) {
        const cf_record_chunk *ch = &chunks[c];
        uint64_t entry = h->index_offset + (uint64_t)c * sizeof *ch, raw = (uint64_t)ch->n_tokens * h->token_bytes;
        if (ch->offset != end || !cf_fits(ch->offset, ch->stored_bytes, h->index_offset))
            return fail(s, err, entry, "chunk %u points outside the data area", c);
        if (zstd ? raw > cf_record_zstd_max_raw(ch->stored_bytes) : raw != ch->stored_bytes)
            return fail(s, err, entry, "chunk %u: n_tokens %u do not fit in its %u stored bytes", c, ch->n_tokens,
                        ch->stored_bytes);
        tokens += ch->n_tokens;
        end += ch->stored_bytes;
    }
    if (tokens != h->n_tokens)
        return fail(s, err, offsetof(cf_record_header, n_tokens), "header n_tokens %llu, but the chunks hold %llu",
                    (unsigned long long)h->n_tokens, (unsigned long long)tokens);
    if (end + cf_record_index_padding(end) != h->index_offset)
        return fail(s, err, h->index_offset, "chunks do not cover the token data");
    size_t raw_total = 0; /* at most 32 KiB per byte of the data area, by the checks above */
    unsigned char *out = NULL;
    if (zstd && (!cf_mul_size(tokens, h->token_bytes, &raw_total) || !(out = malloc(raw_total ? raw_total : 1))))
        return fail(s, err, offsetof(cf_record_header, n_tokens), "cannot allocate %zu bytes for n_tokens %llu",
                    raw_total, (unsigned long long)tokens);
    s->owned = out;
    for (uint32_t c = 0, first = 0; c < h->n_chunks; first += chunks[c].n_tokens, c++) {
        const cf_record_chunk *ch = &chunks[c];
        if (cf_crc32c(0, base + ch->offset, ch->stored_bytes) != ch->crc)
            return fail(s, err, ch->offset, "chunk checksum mismatch (corrupt data)");
        size_t raw = (size_t)ch->n_tokens * h->token_bytes;
        if (zstd) {
            size_t got = ZSTD_decompress(out + (size_t)first * h->token_bytes, raw, base + ch->offset, ch->stored_bytes);
            if (ZSTD_isError(got) || got != raw) return fail(s, err, ch->offset, "chunk does not decompress");
        }
    }
    s->tokens = zstd ? (const void *)out : (const void *)(base + sizeof *h);
    return 0;
}

static int check_index(cf_record_shard *s, const cf_record_header *h, const unsigned char *base, cf_error *err) {
    const unsigned char *index = base + h->index_offset;
    size_t body = s->map_size - h->index_offset - 4; /* the index ends the file: check_header */
    uint32_t crc;
    memcpy(&crc, index + body, 4);
    if (cf_crc32c(0, index, body) != crc) return fail(s, err, h->index_offset, "index checksum mismatch");
    s->doc_offsets = (const uint64_t *)(index + h->n_chunks * sizeof(cf_record_chunk));
    if (s->doc_offsets[0] != 0 || s->doc_offsets[h->n_docs] != h->n_tokens)
        return fail(s, err, h->index_offset, "document index does not span the tokens");
    for (uint64_t d = 0; d < h->n_docs; d++)
        if (s->doc_offsets[d + 1] < s->doc_offsets[d])
            return fail(s, err, h->index_offset + h->n_chunks * sizeof(cf_record_chunk) + d * 8,
                        "document offsets go backwards");
    return 0;
}

/* Every id below the header's vocabulary size; a bad one is named with its token index
 * and its byte offset (that of its zstd chunk when compressed). */
static int check_ids(cf_record_shard *s, const cf_record_header *h, const unsigned char *base, cf_error *err) {
    const cf_record_chunk *chunks = (const cf_record_chunk *)(base + h->index_offset);
    bool zstd = h->flags & CF_RECORD_FLAG_ZSTD;
    int32_t buf[4096];
    for (uint32_t c = 0, first = 0; c < h->n_chunks; first += chunks[c].n_tokens, c++) {
        for (uint32_t i = 0; i < chunks[c].n_tokens; i += 4096) {
            size_t n = chunks[c].n_tokens - i < 4096 ? (size_t)(chunks[c].n_tokens - i) : 4096;
            cf_record_shard_read(s, (uint64_t)first + i, n, buf);
            for (size_t k = 0; k < n; k++)
                if (buf[k] < 0 || buf[k] >= s->vocab_size)
                    return fail(s, err, chunks[c].offset + (zstd ? 0 : (i + k) * (uint64_t)h->token_bytes),
                                "token %llu has id %d outside the vocabulary of %d%s",
                                (unsigned long long)first + i + k, buf[k], s->vocab_size,
                                zstd ? " (in the zstd chunk at that offset)" : "");
        }
    }
    return 0;
}

int cf_record_shard_open(cf_record_shard *s, const char *path, cf_error *err) {
    memset(s, 0, sizeof *s);
    s->path = cf_xstrdup(path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        cf_fail(err, "%s: %s", path, strerror(errno));
        cf_record_shard_close(s);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return fail(s, err, 0, "cannot stat the file: %s", strerror(errno));
    }
    s->map_size = (size_t)st.st_size;
    s->map = s->map_size ? mmap(NULL, s->map_size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        return fail(s, err, 0, "cannot map the file");
    }
    cf_record_header h;
    memset(&h, 0, sizeof h);
    if (s->map_size >= sizeof h) memcpy(&h, s->map, sizeof h);
    if (check_header(s, &h, s->map_size, err) != 0) return -1;
    s->token_bytes = (int)h.token_bytes;
    s->vocab_size = (int)h.vocab_size;
    s->eos_id = h.eos_id;
    s->tokenizer_hash = h.tokenizer_hash;
    s->n_docs = h.n_docs;
    s->n_tokens = h.n_tokens;
    if (check_chunks(s, &h, s->map, err) != 0 || check_index(s, &h, s->map, err) != 0) return -1;
    return check_ids(s, &h, s->map, err);
}

void cf_record_shard_close(cf_record_shard *s) {
    if (s->map) munmap(s->map, s->map_size);
    free(s->owned);
    free(s->path);
    memset(s, 0, sizeof *s);
}

void cf_record_shard_read(const cf_record_shard *s, uint64_t first, size_t n, int32_t *out) {
    if (s->token_bytes == 2) {
        const uint16_t *p = (const uint16_t *)s->tokens + first;
        for (size_t i = 0; i < n; i++) out[i] = p[i];
    } else {
        memcpy(out, (const int32_t *)s->tokens + first, n * 4);
    }
}

static int compare_paths(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int cf_record_list(const char *dir, const char *split, char ***paths, int *n, cf_error *err) {
    *paths = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return cf_fail(err, "%s: %s", dir, strerror(errno));
    size_t plen = strlen(split), slen = strlen(CF_RECORD_SUFFIX);
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= plen + slen || strncmp(e->d_name, split, plen) != 0 || e->d_name[plen] != '-' ||
            strcmp(e->d_name + len - slen, CF_RECORD_SUFFIX) != 0)
            continue;
        *paths = cf_xrealloc(*paths, (size_t)(*n + 1) * sizeof **paths);
        size_t need = strlen(dir) + len + 2;
        (*paths)[*n] = cf_xmalloc(need);
        snprintf((*paths)[*n], need, "%s/%s", dir, e->d_name);
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(*paths, (size_t)*n, sizeof **paths, compare_paths);
    return 0;
}

void cf_record_remove(const char *dir) {
    static const char *const splits[] = {"train", "valid"};
    for (int s = 0; s < 2; s++) {
        char **paths;
        int n;
        if (cf_record_list(dir, splits[s], &paths, &n, NULL) != 0) continue;
        for (int i = 0; i < n; i++) {
            unlink(paths[i]);
            free(paths[i]);
        }
        free(paths);
    }
    rmdir(dir);
}
