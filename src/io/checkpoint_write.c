/* Streaming checkpoint writer: tensors go straight to PATH.tmp, the index and metadata
 * are appended at the end, the header is rewritten last, then fsync + rename. */
#include "cformers/checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "io/atomic_file.h"
#include "io/checkpoint_format.h"
#include "io/checkpoint_internal.h"
#include "io/ckpt_delta.h"
#include "core/json_text.h"

enum { DELTA_MIN_BYTES = 4096, DELTA_ZSTD_LEVEL = 1 };

struct cf_ckpt_writer {
    atomic_file file;
    json_t *index; /* array of tensor entries */
    json_t *names; /* object used as a set, for duplicate detection */
    cf_ckpt *base; /* differential against this one, or NULL */
    char *base_name;
    bool any_delta;
    uint64_t stored, raw;
};

static void writer_free(cf_ckpt_writer *w) {
    json_decref(w->index);
    json_decref(w->names);
    cf_ckpt_close(w->base);
    free(w->base_name);
    free(w);
}

int cf_ckpt_writer_set_base(cf_ckpt_writer *w, const char *base_path, cf_error *err) {
    cf_ckpt *base = cf_ckpt_open(base_path, false, err);
    if (!base) return -1;
    if (cf_ckpt_is_delta(base)) {
        cf_ckpt_close(base);
        return cf_fail(err, "%s: a differential checkpoint cannot be the base of another", base_path);
    }
    const char *slash = strrchr(base_path, '/');
    const char *name = slash ? slash + 1 : base_path;
    if (!cf_utf8_is_valid(name, strlen(name))) { /* the index names the base by it: JSON needs UTF-8 */
        cf_ckpt_close(base);
        return cf_fail(err, "%s: the base checkpoint's file name is not valid UTF-8 (rename it)", base_path);
    }
    cf_ckpt_close(w->base);
    free(w->base_name);
    w->base = base;
    w->base_name = cf_xstrdup(slash ? slash + 1 : base_path);
    return 0;
}

void cf_ckpt_writer_sizes(const cf_ckpt_writer *w, uint64_t *stored, uint64_t *raw) {
    *stored = w->stored;
    *raw = w->raw;
}

static int sink_file(void *ctx, const void *data, size_t n, cf_error *err) { return cf_atomic_file_write(ctx, data, n, err); }

/* The base's tensor to store `name` against, when it has one of the same dtype and shape
 * (its checksum verified), or NULL: stored whole. */
static const cf_ckpt_tensor *delta_base(cf_ckpt_writer *w, const char *name, cf_dtype dtype, int ndim,
                                        const int64_t *shape, size_t nbytes) {
    if (!w->base || nbytes < DELTA_MIN_BYTES || cf_dtype_size(dtype) == 0) return NULL; /* q8_0 blocks: whole */
    const cf_ckpt_tensor *b = cf_ckpt_find(w->base, name);
    if (!b || b->dtype != dtype || b->ndim != ndim || b->nbytes != nbytes) return NULL;
    cf_error ignored = {{0}};
    return cf_ckpt_get(w->base, name, dtype, ndim, shape, &ignored);
}

cf_ckpt_writer *cf_ckpt_writer_open(const char *path, cf_error *err) {
    cf_ckpt_writer *w = cf_xcalloc(1, sizeof *w);
    ckpt_header placeholder = {0}; /* rewritten by finish */
    if (cf_atomic_file_open(&w->file, path, err) != 0) {
        free(w);
        return NULL;
    }
    w->index = json_array();
    w->names = json_object();
    if (cf_atomic_file_write(&w->file, &placeholder, sizeof placeholder, err) != 0) {
        cf_ckpt_writer_abort(w);
        return NULL;
    }
    return w;
}

int cf_ckpt_write_tensor(cf_ckpt_writer *w, const char *name, cf_dtype dtype, int ndim, const int64_t *shape,
                         const void *data, cf_error *err) {
    if (!name || !*name) return cf_fail(err, "%s: tensor with an empty name", w->file.path);
    if (!cf_utf8_is_valid(name, strlen(name))) /* else its index entry would be dropped */
        return cf_fail(err, "%s: a tensor name is not valid UTF-8 (%.80s)", w->file.path, name);
    if (json_object_get(w->names, name)) return cf_fail(err, "%s: tensor %s written twice", w->file.path, name);
    if ((unsigned)dtype >= CF_DTYPE_COUNT) return cf_fail(err, "%s: tensor %s: unknown dtype %d", w->file.path, name, dtype);
    if (ndim < 0 || ndim > CF_CKPT_MAX_DIMS)
        return cf_fail(err, "%s: tensor %s: %d dims (at most %d)", w->file.path, name, ndim, CF_CKPT_MAX_DIMS);
    json_t *dims = json_array();
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            json_decref(dims);
            return cf_fail(err, "%s: tensor %s: negative dim %lld", w->file.path, name, (long long)shape[i]);
        }
        numel *= shape[i];
        json_array_append_new(dims, json_integer(shape[i]));
    }
    size_t nbytes = (size_t)cf_dtype_tensor_bytes(dtype, ndim, shape);
    if (cf_atomic_file_pad(&w->file, CF_CKPT_ALIGN, err) != 0) {
        json_decref(dims);
        return -1;
    }
    uint64_t offset = w->file.offset, stored = nbytes;
    const cf_ckpt_tensor *base = delta_base(w, name, dtype, ndim, shape, nbytes);
    int rc = base ? cf_delta_encode(data, base->data, numel, (int)cf_dtype_size(dtype), DELTA_ZSTD_LEVEL, sink_file,
                                    &w->file, &stored, err)
                  : cf_atomic_file_write(&w->file, data, nbytes, err);
    if (rc != 0) {
        json_decref(dims);
        return cf_fail_prefix(err, "tensor %s: ", name);
    }
    json_t *entry = json_pack("{s:s, s:s, s:o, s:I, s:I, s:I}", "name", name, "dtype", cf_dtype_name(dtype), "shape",
                              dims, "offset", (json_int_t)offset, "nbytes", (json_int_t)nbytes, "crc32c",
                              (json_int_t)cf_crc32c(0, data, nbytes));
    if (base) {
        json_object_set_new(entry, "encoding", json_string(CF_DELTA_ENCODING));
        json_object_set_new(entry, "stored", json_integer((json_int_t)stored));
        json_object_set_new(entry, "base", json_string(w->base_name));
        json_object_set_new(entry, "base_crc32c", json_integer((json_int_t)cf_ckpt_trailer_crc(w->base)));
        w->any_delta = true;
    }
    w->stored += stored;
    w->raw += nbytes;
    json_array_append_new(w->index, entry);
    json_object_set_new(w->names, name, json_true());
    return 0;
}

static int write_trailer(cf_ckpt_writer *w, const char *metadata_json, cf_error *err) {
    if (!metadata_json) metadata_json = "{}";
    json_error_t jerr;
    json_t *meta = json_loads(metadata_json, 0, &jerr);
    if (!meta || !json_is_object(meta)) {
        json_decref(meta);
        return cf_fail(err, "%s: metadata is not a JSON object (%s)", w->file.path, meta ? "other JSON value" : jerr.text);
    }
    json_decref(meta);
    char *index = json_dumps(w->index, JSON_COMPACT);
    ckpt_header h = {.version = w->any_delta ? CKPT_VERSION_DELTA : CKPT_VERSION_FULL, .header_bytes = CKPT_HEADER_BYTES};
    memcpy(h.magic, CKPT_MAGIC, 8);
    int rc = cf_atomic_file_pad(&w->file, 8, err);
    h.index_offset = w->file.offset;
    h.index_bytes = strlen(index);
    if (rc == 0) rc = cf_atomic_file_write(&w->file, index, h.index_bytes, err);
    h.metadata_offset = w->file.offset;
    h.metadata_bytes = strlen(metadata_json);
    if (rc == 0) rc = cf_atomic_file_write(&w->file, metadata_json, h.metadata_bytes, err);
    h.file_bytes = w->file.offset;
    h.trailer_crc32c = cf_crc32c(cf_crc32c(0, index, h.index_bytes), metadata_json, h.metadata_bytes);
    h.header_crc32c = cf_crc32c(0, &h, offsetof(ckpt_header, header_crc32c));
    free(index);
    if (rc != 0) return rc;
    if (fseek(w->file.f, 0, SEEK_SET) != 0 || cf_fwrite(&h, sizeof h, w->file.f) != sizeof h)
        return cf_fail(err, "%s: cannot write the header: %s", w->file.tmp_path, strerror(errno));
    return 0;
}

int cf_ckpt_writer_finish(cf_ckpt_writer *w, const char *metadata_json, cf_error *err) {
    if (write_trailer(w, metadata_json, err) != 0) {
        cf_ckpt_writer_abort(w);
        return -1;
    }
    int rc = cf_atomic_file_commit(&w->file, err);
    writer_free(w);
    return rc;
}

void cf_ckpt_writer_abort(cf_ckpt_writer *w) {
    if (!w) return;
    cf_atomic_file_abort(&w->file);
    writer_free(w);
}
