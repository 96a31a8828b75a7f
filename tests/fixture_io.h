/* Reader for the small reference fixtures written by tools/torch_reference.py.
 *
 * Format (little-endian): "CFFX", u32 version (1), u32 count, then `count` records of
 *   u16 name_len, name, u8 dtype (cf_dtype: 0 f32, 3 bytes, 4 i32), u8 ndim, i64 dims[ndim], data.
 * Each record's data is copied into its own allocation, so it is aligned for its type. */
#ifndef CFORMERS_TEST_FIXTURE_IO_H
#define CFORMERS_TEST_FIXTURE_IO_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/dtype.h"
#include "test_util.h"

enum { FIXTURE_MAX_DIMS = 8 };

typedef struct fixture_record {
    char name[256];
    cf_dtype dtype;
    int ndim;
    int64_t dims[FIXTURE_MAX_DIMS];
    int64_t numel;
    const void *data; /* a malloc'd (so aligned) copy */
} fixture_record;

typedef struct fixture {
    unsigned char *bytes;
    fixture_record *records;
    int count;
} fixture;

static inline void fixture_free(fixture *f) {
    for (int i = 0; f->records && i < f->count; i++) free((void *)f->records[i].data);
    free(f->bytes);
    free(f->records);
    memset(f, 0, sizeof *f);
}

/* Loads `path`; returns 0, or -1 after printing why. */
static inline int fixture_load(fixture *f, const char *path) {
    memset(f, 0, sizeof *f);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f->bytes = malloc((size_t)size + 1);
    size_t got = fread(f->bytes, 1, (size_t)size, fp);
    fclose(fp);
    uint32_t version, count;
    if (got != (size_t)size || size < 12 || memcmp(f->bytes, "CFFX", 4) != 0) goto bad;
    memcpy(&version, f->bytes + 4, 4);
    memcpy(&count, f->bytes + 8, 4);
    if (version != 1) goto bad;
    f->records = calloc(count ? count : 1, sizeof *f->records);
    f->count = (int)count;
    long off = 12;
    for (uint32_t i = 0; i < count; i++) {
        fixture_record *r = &f->records[i];
        uint16_t len;
        if (off + 2 > size) goto bad;
        memcpy(&len, f->bytes + off, 2);
        off += 2;
        if (len >= sizeof r->name || off + len + 2 > size) goto bad;
        memcpy(r->name, f->bytes + off, len);
        off += len;
        r->dtype = (cf_dtype)f->bytes[off];
        r->ndim = f->bytes[off + 1];
        off += 2;
        if (r->ndim > FIXTURE_MAX_DIMS || off + 8 * r->ndim > size) goto bad;
        r->numel = 1;
        for (int d = 0; d < r->ndim; d++) {
            memcpy(&r->dims[d], f->bytes + off, 8);
            off += 8;
            r->numel *= r->dims[d];
        }
        long nbytes = (long)(r->numel * (int64_t)cf_dtype_size(r->dtype));
        if (off + nbytes > size) goto bad;
        r->data = memcpy(malloc((size_t)nbytes + 1), f->bytes + off, (size_t)nbytes);
        off += nbytes;
    }
    return 0;
bad:
    fprintf(stderr, "%s: not a valid CFFX fixture\n", path);
    fixture_free(f);
    return -1;
}

/* The record called `name`, or NULL. */
static inline const fixture_record *fixture_find(const fixture *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (strcmp(f->records[i].name, name) == 0) return &f->records[i];
    return NULL;
}

/* max |a - b| / max(max |b|, tiny): the "relative to the tensor's largest magnitude". */
static inline double fixture_rel_error(const float *a, const float *b, int64_t n) {
    double diff = 0, mag = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), m = fabs((double)b[i]);
        if (d > diff || d != d) diff = d;
        if (m > mag) mag = m;
    }
    return diff / mag;
}

/* The record named fmt % arg, or NULL with a test failure naming it. */
static inline const fixture_record *fixture_need(const fixture *fx, const char *fmt, const char *arg) {
    char name[300];
    snprintf(name, sizeof name, fmt, arg);
    const fixture_record *r = fixture_find(fx, name);
    CHECK_MSG(r != NULL, "fixture lacks %s", name);
    return r;
}

#endif
