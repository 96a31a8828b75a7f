/* Streaming checkpoint writer: tensors go straight to PATH.tmp, the index and metadata
 * are appended at the end, the header is rewritten last, then fsync + rename. */
#include "cformers/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/checkpoint_format.h"

struct cf_ckpt_writer {
    char *path, *tmp_path;
    FILE *f;
    uint64_t offset; /* bytes written so far */
    json_t *index;   /* array of tensor entries */
    json_t *names;   /* object used as a set, for duplicate detection */
};

static int write_bytes(cf_ckpt_writer *w, const void *data, size_t n, cf_error *err) {
    if (n && fwrite(data, 1, n, w->f) != n)
        return cf_fail(err, "%s: write failed at offset %llu: %s", w->tmp_path, (unsigned long long)w->offset,
                       strerror(errno));
    w->offset += n;
    return 0;
}

static int pad_to(cf_ckpt_writer *w, uint64_t align, cf_error *err) {
    static const char zeros[CF_CKPT_ALIGN];
    size_t pad = (size_t)((align - w->offset % align) % align);
    return write_bytes(w, zeros, pad, err);
}

static void writer_free(cf_ckpt_writer *w) {
    if (w->f) fclose(w->f);
    json_decref(w->index);
    json_decref(w->names);
    free(w->path);
    free(w->tmp_path);
    free(w);
}

cf_ckpt_writer *cf_ckpt_writer_open(const char *path, cf_error *err) {
    cf_ckpt_writer *w = cf_xcalloc(1, sizeof *w);
    w->path = cf_xstrdup(path);
    w->tmp_path = cf_xmalloc(strlen(path) + 5);
    sprintf(w->tmp_path, "%s.tmp", path);
    w->f = fopen(w->tmp_path, "wb");
    if (!w->f) {
        cf_fail(err, "%s: cannot create: %s", w->tmp_path, strerror(errno));
        writer_free(w);
        return NULL;
    }
    w->index = json_array();
    w->names = json_object();
    ckpt_header placeholder = {0}; /* rewritten by finish */
    if (write_bytes(w, &placeholder, sizeof placeholder, err) != 0) {
        cf_ckpt_writer_abort(w);
        return NULL;
    }
    return w;
}

int cf_ckpt_write_tensor(cf_ckpt_writer *w, const char *name, cf_dtype dtype, int ndim, const int64_t *shape,
                         const void *data, cf_error *err) {
    if (!name || !*name) return cf_fail(err, "%s: tensor with an empty name", w->path);
    if (json_object_get(w->names, name)) return cf_fail(err, "%s: tensor %s written twice", w->path, name);
    if ((unsigned)dtype >= CF_DTYPE_COUNT) return cf_fail(err, "%s: tensor %s: unknown dtype %d", w->path, name, dtype);
    if (ndim < 0 || ndim > CF_CKPT_MAX_DIMS)
        return cf_fail(err, "%s: tensor %s: %d dims (at most %d)", w->path, name, ndim, CF_CKPT_MAX_DIMS);
    json_t *dims = json_array();
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            json_decref(dims);
            return cf_fail(err, "%s: tensor %s: negative dim %lld", w->path, name, (long long)shape[i]);
        }
        numel *= shape[i];
        json_array_append_new(dims, json_integer(shape[i]));
    }
    size_t nbytes = (size_t)numel * cf_dtype_size(dtype);
    if (pad_to(w, CF_CKPT_ALIGN, err) != 0) {
        json_decref(dims);
        return -1;
    }
    uint64_t offset = w->offset;
    if (write_bytes(w, data, nbytes, err) != 0) {
        json_decref(dims);
        return cf_fail_prefix(err, "tensor %s: ", name);
    }
    json_t *entry = json_pack("{s:s, s:s, s:o, s:I, s:I, s:I}", "name", name, "dtype", cf_dtype_name(dtype), "shape",
                              dims, "offset", (json_int_t)offset, "nbytes", (json_int_t)nbytes, "crc32c",
                              (json_int_t)cf_crc32c(0, data, nbytes));
    json_array_append_new(w->index, entry);
    json_object_set_new(w->names, name, json_true());
    return 0;
}

/* Makes the rename durable: the directory entry must reach the disk too. */
static void sync_parent_dir(const char *path) {
    char *copy = cf_xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

static int write_trailer(cf_ckpt_writer *w, const char *metadata_json, cf_error *err) {
    if (!metadata_json) metadata_json = "{}";
    json_error_t jerr;
    json_t *meta = json_loads(metadata_json, 0, &jerr);
    if (!meta || !json_is_object(meta)) {
        json_decref(meta);
        return cf_fail(err, "%s: metadata is not a JSON object (%s)", w->path, meta ? "other JSON value" : jerr.text);
    }
    json_decref(meta);
    char *index = json_dumps(w->index, JSON_COMPACT);
    ckpt_header h = {.version = CF_CKPT_VERSION, .header_bytes = CKPT_HEADER_BYTES};
    memcpy(h.magic, CKPT_MAGIC, 8);
    int rc = pad_to(w, 8, err);
    h.index_offset = w->offset;
    h.index_bytes = strlen(index);
    if (rc == 0) rc = write_bytes(w, index, h.index_bytes, err);
    h.metadata_offset = w->offset;
    h.metadata_bytes = strlen(metadata_json);
    if (rc == 0) rc = write_bytes(w, metadata_json, h.metadata_bytes, err);
    h.file_bytes = w->offset;
    h.trailer_crc32c = cf_crc32c(cf_crc32c(0, index, h.index_bytes), metadata_json, h.metadata_bytes);
    h.header_crc32c = cf_crc32c(0, &h, offsetof(ckpt_header, header_crc32c));
    free(index);
    if (rc != 0) return rc;
    if (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(&h, sizeof h, 1, w->f) != 1)
        return cf_fail(err, "%s: cannot write the header: %s", w->tmp_path, strerror(errno));
    return 0;
}

int cf_ckpt_writer_finish(cf_ckpt_writer *w, const char *metadata_json, cf_error *err) {
    if (write_trailer(w, metadata_json, err) != 0) {
        cf_ckpt_writer_abort(w);
        return -1;
    }
    int rc = 0;
    if (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0)
        rc = cf_fail(err, "%s: cannot flush to disk: %s", w->tmp_path, strerror(errno));
    if (fclose(w->f) != 0 && rc == 0) rc = cf_fail(err, "%s: close failed: %s", w->tmp_path, strerror(errno));
    w->f = NULL;
    if (rc == 0 && rename(w->tmp_path, w->path) != 0)
        rc = cf_fail(err, "%s: cannot rename %s into place: %s", w->path, w->tmp_path, strerror(errno));
    if (rc == 0)
        sync_parent_dir(w->path);
    else
        unlink(w->tmp_path);
    writer_free(w);
    return rc;
}

void cf_ckpt_writer_abort(cf_ckpt_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    w->f = NULL;
    unlink(w->tmp_path);
    writer_free(w);
}
