/* Checkpoint reader: maps the file, validates header, index and metadata, and checks
 * tensor checksums eagerly (in parallel) or on first use. */
#include "cformers/checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/threads.h"
#include "core/checked.h"
#include "io/checkpoint_format.h"
#include "io/checkpoint_internal.h"
#include "io/ckpt_delta.h"

/* A tensor stored as its difference against a base checkpoint's. */
typedef struct delta_entry {
    const char *base;     /* the base's file name, in this file's directory */
    uint32_t base_crc;    /* the base's trailer checksum when this file was written */
    size_t stored;        /* bytes of the encoding at the tensor's offset */
    void *rebuilt;        /* the tensor's data once rebuilt (owned) */
} delta_entry;

struct cf_ckpt {
    char *path;
    const unsigned char *map;
    size_t map_bytes;
    char *metadata;
    json_t *index;          /* owns the tensor name strings */
    cf_ckpt_tensor *tensors; /* sorted by name */
    bool *verified;
    bool *used;             /* returned by cf_ckpt_get */
    long n;
    uint32_t trailer_crc;
    delta_entry *deltas;    /* per tensor (sorted order); NULL when none is differential */
};

/* An index entry as parsed: the tensor and, when it is stored as a difference, how. */
typedef struct index_entry {
    cf_ckpt_tensor t;
    delta_entry d;
} index_entry;

static int by_name(const void *a, const void *b) {
    return strcmp(((const cf_ckpt_tensor *)a)->name, ((const cf_ckpt_tensor *)b)->name);
}

static int entries_by_name(const void *a, const void *b) {
    return by_name(&((const index_entry *)a)->t, &((const index_entry *)b)->t);
}

static int parse_entry(cf_ckpt *c, json_t *e, long i, const ckpt_header *h, cf_ckpt_tensor *t, delta_entry *d,
                       cf_error *err) {
    const char *name = NULL, *dtype = NULL, *encoding = NULL, *base = NULL;
    json_t *shape = NULL;
    json_int_t offset = -1, nbytes = -1, crc = -1, stored = -1, base_crc = -1;
    json_error_t jerr;
    if (json_unpack_ex(e, &jerr, JSON_STRICT, "{s:s, s:s, s:o, s:I, s:I, s:I, s?s, s?I, s?s, s?I}", "name", &name,
                       "dtype", &dtype, "shape", &shape, "offset", &offset, "nbytes", &nbytes, "crc32c", &crc,
                       "encoding", &encoding, "stored", &stored, "base", &base, "base_crc32c", &base_crc) != 0)
        return cf_fail(err, "%s: index entry %ld: %s", c->path, i, jerr.text);
    if (encoding) {
        if (strcmp(encoding, CF_DELTA_ENCODING) != 0 || h->version < CKPT_VERSION_DELTA)
            return cf_fail(err, "%s: tensor %s: unknown encoding '%s'", c->path, name, encoding);
        if (!base || !*base || strchr(base, '/') || stored < 0 || base_crc < 0 || base_crc > 0xffffffffLL)
            return cf_fail(err, "%s: tensor %s: a difference needs its base's file name, base_crc32c and stored size",
                           c->path, name);
        *d = (delta_entry){.base = base, .base_crc = (uint32_t)base_crc, .stored = (size_t)stored};
    }
    t->name = name;
    if (cf_dtype_parse(dtype, &t->dtype) != 0) return cf_fail(err, "%s: tensor %s: unknown dtype '%s'", c->path, name, dtype);
    if (encoding && cf_dtype_size(t->dtype) == 0) /* the difference is per element; q8_0 is stored whole */
        return cf_fail(err, "%s: tensor %s: dtype %s cannot be stored as a difference", c->path, name, dtype);
    if (!json_is_array(shape) || json_array_size(shape) > CF_CKPT_MAX_DIMS)
        return cf_fail(err, "%s: tensor %s: shape must be an array of at most %d dims", c->path, name, CF_CKPT_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    t->numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *v = json_array_get(shape, (size_t)d);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > ((int64_t)1 << 40))
            return cf_fail(err, "%s: tensor %s: bad dim %d", c->path, name, d);
        t->shape[d] = json_integer_value(v);
        t->numel *= t->shape[d];
        if (t->numel > ((int64_t)1 << 40)) return cf_fail(err, "%s: tensor %s: too many elements", c->path, name);
    }
    if ((uint64_t)nbytes != cf_dtype_tensor_bytes(t->dtype, t->ndim, t->shape))
        return cf_fail(err, "%s: tensor %s: %lld bytes do not match shape and dtype %s", c->path, name,
                       (long long)nbytes, dtype);
    uint64_t span = encoding ? (uint64_t)stored : (uint64_t)nbytes;
    if (offset < CKPT_HEADER_BYTES || offset % CF_CKPT_ALIGN || !cf_fits((uint64_t)offset, span, h->index_offset))
        return cf_fail(err, "%s: tensor %s: data at offset %lld (+%llu bytes) lies outside the data region", c->path,
                       name, (long long)offset, (unsigned long long)span);
    if (crc < 0 || crc > 0xffffffffLL) return cf_fail(err, "%s: tensor %s: bad crc32c", c->path, name);
    t->offset = (uint64_t)offset;
    t->nbytes = (size_t)nbytes;
    t->crc32c = (uint32_t)crc;
    t->data = c->map + offset;
    return 0;
}

static int parse_header(cf_ckpt *c, ckpt_header *h, cf_error *err) {
    if (c->map_bytes < CKPT_HEADER_BYTES)
        return cf_fail(err, "%s: %zu bytes, too short for a checkpoint header", c->path, c->map_bytes);
    memcpy(h, c->map, sizeof *h);
    if (memcmp(h->magic, "GGUF", 4) == 0)
        return cf_fail(err, "%s: a GGUF file, not a cformers checkpoint (the commands that read a model convert it)",
                       c->path);
    if (memcmp(h->magic, CKPT_MAGIC, 8) != 0) return cf_fail(err, "%s: not a cformers checkpoint (bad magic)", c->path);
    if (h->header_crc32c != cf_crc32c(0, h, offsetof(ckpt_header, header_crc32c)))
        return cf_fail(err, "%s: offset 0: header checksum mismatch (corrupt or unfinished file)", c->path);
    if (h->version != CKPT_VERSION_FULL && h->version != CKPT_VERSION_DELTA)
        return cf_fail(err, "%s: checkpoint version %u, this build reads versions 1 to %d", c->path, h->version,
                       CF_CKPT_VERSION);
    if (h->file_bytes != c->map_bytes)
        return cf_fail(err, "%s: file is %zu bytes, header says %llu (truncated?)", c->path, c->map_bytes,
                       (unsigned long long)h->file_bytes);
    if (h->index_offset < CKPT_HEADER_BYTES || !cf_fits(h->index_offset, h->index_bytes, h->file_bytes) ||
        !cf_fits(h->metadata_offset, h->metadata_bytes, h->file_bytes) ||
        h->index_offset + h->index_bytes != h->metadata_offset || h->metadata_offset + h->metadata_bytes != h->file_bytes)
        return cf_fail(err, "%s: offset %zu: header index_offset %llu + index_bytes %llu, metadata_offset %llu + "
                            "metadata_bytes %llu do not tile the end of the %llu-byte file",
                       c->path, offsetof(ckpt_header, index_offset), (unsigned long long)h->index_offset,
                       (unsigned long long)h->index_bytes, (unsigned long long)h->metadata_offset,
                       (unsigned long long)h->metadata_bytes, (unsigned long long)h->file_bytes);
    uint32_t crc = cf_crc32c(0, c->map + h->index_offset, h->index_bytes + h->metadata_bytes);
    c->trailer_crc = crc;
    if (crc != h->trailer_crc32c)
        return cf_fail(err, "%s: offset %llu: index/metadata checksum mismatch", c->path,
                       (unsigned long long)h->index_offset);
    return 0;
}

static int parse_trailer(cf_ckpt *c, const ckpt_header *h, cf_error *err) {
    json_error_t jerr;
    c->index = json_loadb((const char *)c->map + h->index_offset, h->index_bytes, 0, &jerr);
    if (!c->index || !json_is_array(c->index))
        return cf_fail(err, "%s: offset %llu: tensor index is not a JSON array (%s)", c->path,
                       (unsigned long long)h->index_offset, c->index ? "wrong type" : jerr.text);
    c->metadata = cf_xmalloc(h->metadata_bytes + 1);
    memcpy(c->metadata, c->map + h->metadata_offset, h->metadata_bytes);
    c->metadata[h->metadata_bytes] = 0;
    c->n = (long)json_array_size(c->index);
    c->tensors = cf_xcalloc((size_t)c->n + 1, sizeof *c->tensors);
    c->verified = cf_xcalloc((size_t)c->n + 1, sizeof *c->verified);
    c->used = cf_xcalloc((size_t)c->n + 1, sizeof *c->used);
    index_entry *entries = cf_xcalloc((size_t)c->n + 1, sizeof *entries);
    bool any = false;
    for (long i = 0; i < c->n; i++) {
        if (parse_entry(c, json_array_get(c->index, (size_t)i), i, h, &entries[i].t, &entries[i].d, err) != 0) {
            free(entries);
            return -1;
        }
        any |= entries[i].d.base != NULL;
    }
    qsort(entries, (size_t)c->n, sizeof *entries, entries_by_name); /* each delta entry sorted with its tensor */
    if (any) c->deltas = cf_xcalloc((size_t)c->n + 1, sizeof *c->deltas);
    for (long i = 0; i < c->n; i++) {
        c->tensors[i] = entries[i].t;
        if (any) c->deltas[i] = entries[i].d;
    }
    free(entries);
    for (long i = 1; i < c->n; i++)
        if (strcmp(c->tensors[i - 1].name, c->tensors[i].name) == 0)
            return cf_fail(err, "%s: tensor %s appears twice in the index", c->path, c->tensors[i].name);
    return 0;
}

static int verify_tensor(const cf_ckpt *c, const cf_ckpt_tensor *t, cf_error *err) {
    if (cf_crc32c(0, t->data, t->nbytes) != t->crc32c)
        return cf_fail(err, "%s: tensor %s: checksum mismatch in data at offset %llu (corrupt file)", c->path, t->name,
                       (unsigned long long)t->offset);
    return 0;
}

typedef struct verify_job {
    cf_ckpt *c;
    atomic_long first_bad; /* lowest failing index, or n */
} verify_job;

static void verify_task(void *arg, int task, int thread) {
    (void)thread;
    verify_job *j = arg;
    if (verify_tensor(j->c, &j->c->tensors[task], NULL) == 0) {
        j->c->verified[task] = true;
        return;
    }
    long cur = atomic_load(&j->first_bad);
    while (task < cur && !atomic_compare_exchange_weak(&j->first_bad, &cur, task)) {
    }
}

static int verify_all(cf_ckpt *c, cf_error *err) {
    verify_job job = {.c = c};
    atomic_init(&job.first_bad, c->n);
    cf_parallel_for((int)c->n, verify_task, &job);
    long bad = atomic_load(&job.first_bad);
    return bad < c->n ? verify_tensor(c, &c->tensors[bad], err) : 0;
}

/* Maps `path` and validates its header and index; differential tensors not rebuilt. */
static cf_ckpt *open_container(const char *path, cf_error *err) {
    cf_ckpt *c = cf_xcalloc(1, sizeof *c);
    c->path = cf_xstrdup(path);
    int fd = cf_model_source_fd(path); /* a model converted in memory under this path */
    if (fd < 0) fd = open(path, O_RDONLY);
    struct stat st;
    bool dir = false;
    if (fd < 0 || fstat(fd, &st) != 0 || (dir = S_ISDIR(st.st_mode))) {
        if (dir)
            cf_fail(err, "%s: is a directory, not a checkpoint file (a Hugging Face directory is converted by the "
                         "commands that read a model)", path);
        else
            cf_fail(err, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        cf_ckpt_close(c);
        return NULL;
    }
    c->map_bytes = (size_t)st.st_size;
    if (c->map_bytes > 0) {
        void *m = mmap(NULL, c->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            cf_fail(err, "%s: cannot map: %s", path, strerror(errno));
            close(fd);
            c->map_bytes = 0;
            cf_ckpt_close(c);
            return NULL;
        }
        c->map = m;
#ifdef MADV_HUGEPAGE
        /* weights used in place are streamed once per decoded token: huge pages where the
         * file system gives them (ext4 here: 522 of 536 MB PMD-mapped on a first read,
         * 477 without the advice) */
        madvise(m, c->map_bytes, MADV_HUGEPAGE);
#endif
    }
    close(fd);
    ckpt_header h;
    if (parse_header(c, &h, err) != 0 || parse_trailer(c, &h, err) != 0) {
        cf_ckpt_close(c);
        return NULL;
    }
    return c;
}

/* The base named by delta entry d, opened (and kept in *base) from c's directory. */
static cf_ckpt *open_base(cf_ckpt *c, const delta_entry *d, cf_ckpt **base, cf_error *err) {
    if (*base && strcmp(strrchr(cf_ckpt_path(*base), '/') + 1, d->base) == 0) return *base;
    cf_ckpt_close(*base);
    const char *slash = strrchr(c->path, '/');
    int dir = slash ? (int)(slash - c->path) : 1;
    char path[4096];
    snprintf(path, sizeof path, "%.*s/%s", dir, slash ? c->path : ".", d->base);
    cf_error why = {{0}};
    *base = open_container(path, &why);
    if (!*base) {
        cf_fail(err, "%s: differential checkpoint whose base %s cannot be read (%s)", c->path, d->base, why.msg);
        return NULL;
    }
    if ((*base)->deltas) {
        cf_fail(err, "%s: its base %s is itself differential", c->path, d->base);
        return NULL;
    }
    if ((*base)->trailer_crc != d->base_crc) {
        cf_fail(err, "%s: its base %s is not the checkpoint it was made against (replaced since)", c->path, d->base);
        return NULL;
    }
    return *base;
}

/* Rebuilds every differential tensor from its encoding and the base's tensor. */
static int rebuild(cf_ckpt *c, cf_error *err) {
    cf_ckpt *base = NULL;
    int rc = 0;
    for (long i = 0; i < c->n && rc == 0; i++) {
        delta_entry *d = &c->deltas[i];
        cf_ckpt_tensor *t = &c->tensors[i];
        if (!d->base) continue;
        if (!open_base(c, d, &base, err)) {
            rc = -1;
            break;
        }
        cf_error why = {{0}};
        const cf_ckpt_tensor *b = cf_ckpt_get(base, t->name, t->dtype, t->ndim, t->shape, &why);
        if (!b) {
            rc = cf_fail(err, "%s: tensor %s: base %s does not hold it whole (%s)", c->path, t->name, d->base, why.msg);
            break;
        }
        char what[512];
        snprintf(what, sizeof what, "%s: tensor %s", c->path, t->name);
        d->rebuilt = cf_xmalloc(t->nbytes ? t->nbytes : 1);
        rc = cf_delta_decode(t->data, d->stored, b->data, t->numel, (int)cf_dtype_size(t->dtype), d->rebuilt, what, err);
        t->data = d->rebuilt;
    }
    cf_ckpt_close(base);
    return rc;
}

cf_ckpt *cf_ckpt_open(const char *path, bool verify, cf_error *err) {
    cf_ckpt *c = open_container(path, err);
    if (c && ((c->deltas && rebuild(c, err) != 0) || (verify && verify_all(c, err) != 0))) {
        cf_ckpt_close(c);
        return NULL;
    }
    return c;
}

int cf_ckpt_base_name(const char *path, char *buf, size_t size, cf_error *err) {
    cf_ckpt *c = open_container(path, err);
    if (!c) return -1;
    snprintf(buf, size, "%s", "");
    for (long i = 0; c->deltas && i < c->n; i++)
        if (c->deltas[i].base) {
            snprintf(buf, size, "%s", c->deltas[i].base);
            break;
        }
    cf_ckpt_close(c);
    return 0;
}

bool cf_ckpt_is_delta(const cf_ckpt *c) { return c->deltas != NULL; }
uint32_t cf_ckpt_trailer_crc(const cf_ckpt *c) { return c->trailer_crc; }

void cf_ckpt_close(cf_ckpt *c) {
    if (!c) return;
    if (c->map) munmap((void *)c->map, c->map_bytes);
    for (long i = 0; c->deltas && i < c->n; i++) free(c->deltas[i].rebuilt);
    free(c->deltas);
    json_decref(c->index);
    free(c->tensors);
    free(c->verified);
    free(c->used);
    free(c->metadata);
    free(c->path);
    free(c);
}

const char *cf_ckpt_path(const cf_ckpt *c) { return c->path; }
const char *cf_ckpt_metadata(const cf_ckpt *c) { return c->metadata; }
long cf_ckpt_num_tensors(const cf_ckpt *c) { return c->n; }

const cf_ckpt_tensor *cf_ckpt_tensor_at(const cf_ckpt *c, long index) {
    return index >= 0 && index < c->n ? &c->tensors[index] : NULL;
}

const cf_ckpt_tensor *cf_ckpt_find(const cf_ckpt *c, const char *name) {
    cf_ckpt_tensor key = {.name = name};
    return bsearch(&key, c->tensors, (size_t)c->n, sizeof key, by_name);
}

static void format_shape(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

const cf_ckpt_tensor *cf_ckpt_get(cf_ckpt *c, const char *name, cf_dtype dtype, int ndim, const int64_t *shape,
                                  cf_error *err) {
    const cf_ckpt_tensor *t = cf_ckpt_find(c, name);
    if (!t) {
        cf_fail(err, "%s: tensor %s is missing", c->path, name);
        return NULL;
    }
    if (t->dtype != dtype) {
        cf_fail(err, "%s: tensor %s has dtype %s, expected %s", c->path, name, cf_dtype_name(t->dtype),
                cf_dtype_name(dtype));
        return NULL;
    }
    if (ndim >= 0 && (t->ndim != ndim || (ndim > 0 && memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim) != 0))) {
        char got[160], want[160];
        format_shape(got, sizeof got, t->ndim, t->shape);
        format_shape(want, sizeof want, ndim, shape);
        cf_fail(err, "%s: tensor %s has shape %s, expected %s", c->path, name, got, want);
        return NULL;
    }
    long i = t - c->tensors;
    if (!c->verified[i]) {
        if (verify_tensor(c, t, err) != 0) return NULL;
        c->verified[i] = true;
    }
    c->used[i] = true;
    return t;
}

const cf_ckpt_tensor *cf_ckpt_first_unused(const cf_ckpt *c) {
    for (long i = 0; i < c->n; i++) {
        const char *name = c->tensors[i].name;
        if (!c->used[i] && strncmp(name, "optimizer.", 10) != 0 && strncmp(name, "tokenizer.", 10) != 0)
            return &c->tensors[i];
    }
    return NULL;
}
