#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checked.h"
#include "io/atomic_file.h"

static const struct {
    const char *name;
    cf_dtype dtype;
} dtype_names[] = {{"F32", CF_F32}, {"BF16", CF_BF16}, {"F16", CF_F16}, {"I8", CF_I8}, {"I32", CF_I32}};

static int parse_dtype(const char *s, cf_dtype *out) {
    for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
        if (strcmp(s, dtype_names[i].name) == 0) return *out = dtype_names[i].dtype, 0;
    return -1;
}

static const char *dtype_name(cf_dtype t) {
    for (size_t i = 0; i < sizeof dtype_names / sizeof dtype_names[0]; i++)
        if (dtype_names[i].dtype == t) return dtype_names[i].name;
    return "?";
}

/* One header entry, checked against the data section [data_start, f->size): every dim a
 * non-negative integer, the element count and byte size computed without overflow, the
 * offsets integers inside the section, their span exactly the shape times the dtype size.
 * Data not aligned to its element size is copied afterwards (align_copies). */
static int parse_tensor(st_file *f, const char *name, json_t *e, uint64_t data_start, st_tensor *t, cf_error *err) {
    const char *dtype;
    json_t *shape, *offsets;
    if (json_unpack(e, "{s:s, s:o, s:o}", "dtype", &dtype, "shape", &shape, "data_offsets", &offsets) != 0 ||
        !json_is_array(shape) || !json_is_array(offsets) || json_array_size(offsets) != 2)
        return cf_fail(err, "%s: tensor %s: header entry needs dtype, shape and data_offsets", f->path, name);
    t->name = name;
    if (parse_dtype(dtype, &t->dtype) != 0)
        return cf_fail(err, "%s: tensor %s: dtype %s is not supported (F32, BF16, F16, I8, I32)", f->path, name, dtype);
    if (json_array_size(shape) > 8) return cf_fail(err, "%s: tensor %s: more than 8 dims", f->path, name);
    t->ndim = (int)json_array_size(shape);
    size_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *dim = json_array_get(shape, (size_t)d);
        json_int_t v = json_integer_value(dim);
        if (!json_is_integer(dim) || v < 0) return cf_fail(err, "%s: tensor %s: shape[%d] is not a size", f->path, name, d);
        if (!cf_mul_size(numel, (uint64_t)v, &numel))
            return cf_fail(err, "%s: tensor %s: shape[%d] = %lld overflows the element count", f->path, name, d,
                           (long long)v);
        t->shape[d] = v;
    }
    json_t *jb = json_array_get(offsets, 0), *je = json_array_get(offsets, 1);
    json_int_t begin = json_integer_value(jb), end = json_integer_value(je);
    uint64_t data_size = f->size - data_start;
    if (!json_is_integer(jb) || !json_is_integer(je) || begin < 0 || end < begin ||
        !cf_fits((uint64_t)begin, (uint64_t)(end - begin), data_size))
        return cf_fail(err, "%s: tensor %s: data_offsets [%lld, %lld] lie outside the file's %llu-byte data section",
                       f->path, name, (long long)begin, (long long)end, (unsigned long long)data_size);
    t->nbytes = (size_t)(end - begin);
    size_t expect;
    if (!cf_mul_size(numel, cf_dtype_size(t->dtype), &expect) || t->nbytes != expect)
        return cf_fail(err, "%s: tensor %s: data_offsets span %zu bytes, but shape and dtype %s need %zu elements of %zu",
                       f->path, name, t->nbytes, dtype, numel, cf_dtype_size(t->dtype));
    t->data = f->map + data_start + begin;
    return 0;
}

static bool misaligned(const st_tensor *t) { return (uintptr_t)t->data % cf_dtype_size(t->dtype) != 0; }

/* Other writers (and ours before it ordered the data) pack tensors back to back, so a BF16
 * tensor of odd length leaves the next F32 one at an offset that is not a multiple of 4;
 * the mapping is page-aligned, so such data is exactly the data whose address is
 * misaligned. Those tensors are copied once into one buffer, each at an 8-byte multiple,
 * and every st_tensor's data is then read in place as its type. The copies are bounded by
 * the data section (tensors do not overlap in a valid file); a header whose misaligned
 * spans add up to more is refused. */
static int align_copies(st_file *f, uint64_t data_size, cf_error *err) {
    size_t bytes = 0, padded = 0;
    for (long i = 0; i < f->n; i++)
        if (misaligned(&f->tensors[i])) {
            bytes += f->tensors[i].nbytes; /* each is at most data_size: no wrap before the check */
            padded += (f->tensors[i].nbytes + 7) / 8 * 8;
            if (bytes > data_size)
                return cf_fail(err, "%s: tensor %s: unaligned tensors overlap (their spans exceed the %llu-byte data "
                                    "section)",
                               f->path, f->tensors[i].name, (unsigned long long)data_size);
        }
    if (padded == 0) return 0;
    unsigned char *copy = f->copies = cf_xmalloc(padded);
    for (long i = 0; i < f->n; i++) {
        st_tensor *t = &f->tensors[i];
        if (!misaligned(t)) continue;
        memcpy(copy, t->data, t->nbytes);
        t->data = copy;
        copy += (t->nbytes + 7) / 8 * 8;
    }
    return 0;
}

static int compare_names(const void *a, const void *b) {
    return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

int cf_st_open(st_file *f, const char *path, cf_error *err) {
    *f = (st_file){.path = cf_xstrdup(path)};
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        cf_fail(err, "%s: cannot open: %s", path, strerror(errno));
        cf_st_close(f);
        return -1;
    }
    f->size = (size_t)st.st_size;
    void *map = f->size ? mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) {
        f->size = 0;
        cf_fail(err, "%s: cannot map (empty or unreadable file)", path);
        cf_st_close(f);
        return -1;
    }
    f->map = map;
    uint64_t header_len = 0;
    if (f->size >= 8) memcpy(&header_len, f->map, 8);
    json_error_t jerr;
    if (f->size < 8) {
        cf_fail(err, "%s: %zu bytes, too short to hold the 8-byte header length (truncated or not safetensors)", path,
                f->size);
    } else if (header_len > f->size - 8) {
        cf_fail(err, "%s: offset 0: header length %llu exceeds the %zu-byte file (truncated or not safetensors)", path,
                (unsigned long long)header_len, f->size);
    } else if (!(f->header = json_loadb((const char *)f->map + 8, header_len, 0, &jerr)) || !json_is_object(f->header)) {
        cf_fail(err, "%s: offset 8: header is not a JSON object", path);
    } else {
        f->tensors = cf_xcalloc(json_object_size(f->header) + 1, sizeof *f->tensors);
        const char *name;
        json_t *e;
        json_object_foreach(f->header, name, e) {
            if (strcmp(name, "__metadata__") == 0) continue;
            if (parse_tensor(f, name, e, 8 + header_len, &f->tensors[f->n], err) != 0) {
                cf_st_close(f);
                return -1;
            }
            f->n++;
        }
        if (align_copies(f, f->size - 8 - header_len, err) != 0) {
            cf_st_close(f);
            return -1;
        }
        f->by_name = cf_xcalloc((size_t)f->n + 1, sizeof *f->by_name);
        for (long i = 0; i < f->n; i++) f->by_name[i] = &f->tensors[i];
        qsort(f->by_name, (size_t)f->n, sizeof *f->by_name, compare_names);
        return 0;
    }
    cf_st_close(f);
    return -1;
}

const st_tensor *cf_st_find(const st_file *f, const char *name) {
    st_tensor key = {.name = name};
    const st_tensor *k = &key, **hit = bsearch(&k, f->by_name, (size_t)f->n, sizeof *f->by_name, compare_names);
    return hit ? *hit : NULL;
}

void cf_st_close(st_file *f) {
    if (f->map) munmap((void *)f->map, f->size);
    json_decref(f->header);
    free(f->tensors);
    free(f->by_name);
    free(f->copies);
    free(f->path);
    *f = (st_file){0};
}

/* Tensors of element size `size` go in data pass `pass` (0: 8-byte elements ... 3: bytes). */
static int data_pass(const st_tensor *t) {
    size_t size = cf_dtype_size(t->dtype);
    return size >= 8 ? 0 : size >= 4 ? 1 : size >= 2 ? 2 : 3;
}

int cf_st_write(const char *path, const st_tensor *tensors, long n, cf_error *err) {
    /* The data holds the tensors by element size, largest first (as the safetensors library
     * orders them): each then starts at a multiple of its element size, without the gaps
     * between tensors that the format forbids ("the byte buffer ... cannot contain holes").
     * The header keeps the order given. offsets: [n] start of each tensor's data. */
    uint64_t *offsets = cf_xcalloc((size_t)n + 1, sizeof *offsets), offset = 0;
    for (int pass = 0; pass < 4; pass++)
        for (long i = 0; i < n; i++)
            if (data_pass(&tensors[i]) == pass) offsets[i] = offset, offset += tensors[i].nbytes;
    json_t *header = json_object();
    for (long i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < tensors[i].ndim; d++) json_array_append_new(shape, json_integer(tensors[i].shape[d]));
        json_object_set_new(header, tensors[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_name(tensors[i].dtype), "shape", shape,
                                      "data_offsets", (json_int_t)offsets[i],
                                      (json_int_t)(offsets[i] + tensors[i].nbytes)));
    }
    free(offsets);
    json_object_set_new(header, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *text = json_dumps(header, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(header);
    size_t len = strlen(text);
    uint64_t padded = (len + 7) / 8 * 8; /* data starts 8-byte aligned; the header is padded with spaces */
    atomic_file a;
    int rc = cf_atomic_file_open(&a, path, err);
    if (rc == 0) rc = cf_atomic_file_write(&a, &padded, 8, err);
    if (rc == 0) rc = cf_atomic_file_write(&a, text, len, err);
    if (rc == 0) rc = cf_atomic_file_write(&a, "       ", padded - len, err);
    for (int pass = 0; pass < 4; pass++)
        for (long i = 0; i < n && rc == 0; i++)
            if (data_pass(&tensors[i]) == pass) rc = cf_atomic_file_write(&a, tensors[i].data, tensors[i].nbytes, err);
    free(text);
    if (rc == 0) return cf_atomic_file_commit(&a, err);
    if (a.path) cf_atomic_file_abort(&a);
    return -1;
}
