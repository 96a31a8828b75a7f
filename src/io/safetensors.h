/* The safetensors format: u64 little-endian header length, a JSON header
 * {"NAME": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the raw little-endian data (offsets relative to its start). */
#ifndef CFORMERS_IO_SAFETENSORS_H
#define CFORMERS_IO_SAFETENSORS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/dtype.h"
#include "cformers/error.h"

typedef struct st_tensor {
    const char *name;
    cf_dtype dtype;
    int ndim;
    int64_t shape[8];
    const void *data;
    size_t nbytes;
} st_tensor;

typedef struct st_file {
    char *path;
    const unsigned char *map;
    size_t size;
    json_t *header;    /* owns the names */
    st_tensor *tensors; /* in header order */
    long n;
    const st_tensor **by_name; /* the same, sorted by name, for cf_st_find */
    void *copies;              /* aligned copies of the tensors whose data is not aligned */
} st_file;

/* Maps and validates the file (header JSON, dtypes, offsets inside the file, sizes). Every
 * tensor's data is aligned to its element size: data the file holds unaligned (writers
 * that pack tensors back to back) is copied. */
int cf_st_open(st_file *f, const char *path, cf_error *err);
/* The tensor called `name`, or NULL (a binary search: a header of many tensors costs
 * n log n to look through, not n^2). */
const st_tensor *cf_st_find(const st_file *f, const char *name);
void cf_st_close(st_file *f);

/* Writes a safetensors file atomically: the header lists the tensors in the order given and
 * is padded with spaces to a multiple of 8 bytes; the data holds them by element size,
 * largest first, so each is aligned to its elements. */
int cf_st_write(const char *path, const st_tensor *tensors, long n, cf_error *err);

#endif
