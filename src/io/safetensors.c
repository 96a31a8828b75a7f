#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_int_t v = json_integer_value(json_array_get(shape, (size_t)d));
        if (!json_is_integer(json_array_get(shape, (size_t)d)) || v < 0 || v > ((json_int_t)1 << 40))
            return cf_fail(err, "%s: tensor %s: bad dim %d", f->path, name, d);
        t->shape[d] = v;
        numel *= (uint64_t)v;
    }
    json_int_t begin = json_integer_value(json_array_get(offsets, 0)), end = json_integer_value(json_array_get(offsets, 1));
    if (begin < 0 || end < begin || data_start + (uint64_t)end > f->size)
        return cf_fail(err, "%s: tensor %s: data_offsets [%lld, %lld] lie outside the file", f->path, name,
                       (long long)begin, (long long)end);
    t->nbytes = (size_t)(end - begin);
    if (t->nbytes != numel * cf_dtype_size(t->dtype))
        return cf_fail(err, "%s: tensor %s: %zu bytes do not match its shape and dtype", f->path, name, t->nbytes);
    t->data = f->map + data_start + begin;
    return 0;
}

int st_open(st_file *f, const char *path, cf_error *err) {
    *f = (st_file){.path = cf_xstrdup(path)};
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) close(fd);
        cf_fail(err, "%s: cannot open: %s", path, strerror(errno));
        st_close(f);
        return -1;
    }
    f->size = (size_t)st.st_size;
    void *map = f->size ? mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (map == MAP_FAILED) {
        f->size = 0;
        cf_fail(err, "%s: cannot map (empty or unreadable file)", path);
        st_close(f);
        return -1;
    }
    f->map = map;
    uint64_t header_len = 0;
    if (f->size >= 8) memcpy(&header_len, f->map, 8);
    json_error_t jerr;
    if (f->size < 8 || header_len > f->size - 8) {
        cf_fail(err, "%s: offset 0: header length %llu exceeds the file (truncated or not safetensors)", path,
                (unsigned long long)header_len);
    } else if (!(f->header = json_loadb((const char *)f->map + 8, header_len, 0, &jerr)) || !json_is_object(f->header)) {
        cf_fail(err, "%s: offset 8: header is not a JSON object", path);
    } else {
        f->tensors = cf_xcalloc(json_object_size(f->header) + 1, sizeof *f->tensors);
        const char *name;
        json_t *e;
        json_object_foreach(f->header, name, e) {
            if (strcmp(name, "__metadata__") == 0) continue;
            if (parse_tensor(f, name, e, 8 + header_len, &f->tensors[f->n], err) != 0) {
                st_close(f);
                return -1;
            }
            f->n++;
        }
        return 0;
    }
    st_close(f);
    return -1;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    for (long i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

void st_close(st_file *f) {
    if (f->map) munmap((void *)f->map, f->size);
    json_decref(f->header);
    free(f->tensors);
    free(f->path);
    *f = (st_file){0};
}

int st_write(const char *path, const st_tensor *tensors, long n, cf_error *err) {
    json_t *header = json_object();
    uint64_t offset = 0;
    for (long i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < tensors[i].ndim; d++) json_array_append_new(shape, json_integer(tensors[i].shape[d]));
        json_object_set_new(header, tensors[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_name(tensors[i].dtype), "shape", shape,
                                      "data_offsets", (json_int_t)offset, (json_int_t)(offset + tensors[i].nbytes)));
        offset += tensors[i].nbytes;
    }
    json_object_set_new(header, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *text = json_dumps(header, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(header);
    size_t len = strlen(text);
    uint64_t padded = (len + 7) / 8 * 8; /* data starts 8-byte aligned; the header is padded with spaces */
    atomic_file a;
    int rc = atomic_file_open(&a, path, err);
    if (rc == 0) rc = atomic_file_write(&a, &padded, 8, err);
    if (rc == 0) rc = atomic_file_write(&a, text, len, err);
    if (rc == 0) rc = atomic_file_write(&a, "       ", padded - len, err);
    for (long i = 0; i < n && rc == 0; i++) rc = atomic_file_write(&a, tensors[i].data, tensors[i].nbytes, err);
    free(text);
    if (rc == 0) return atomic_file_commit(&a, err);
    if (a.path) atomic_file_abort(&a);
    return -1;
}
