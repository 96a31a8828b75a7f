/* Internal: the differential encoding of a checkpoint tensor against the same tensor of
 * an earlier (base) checkpoint, lossless.
 *
 * The tensor's bytes are XOR-ed with the base's, in blocks of CF_DELTA_BLOCK elements;
 * within a block the result is laid out by byte plane (byte 0 of every element, then
 * byte 1, ...), so the planes that barely change between two steps of training (the
 * signs and exponents of f32 weights) become long runs of zeros; the blocks go through
 * one zstd stream. Decoding reverses it and the caller checks the result's CRC32C. */
#ifndef CFORMERS_IO_CKPT_DELTA_H
#define CFORMERS_IO_CKPT_DELTA_H

#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"

#define CF_DELTA_ENCODING "xor-planes-zstd"
enum { CF_DELTA_BLOCK = 1 << 18 }; /* elements per block of planes */

/* Receives encoded bytes as they are produced; returns 0, or -1 with err set. */
typedef int (*cf_delta_sink)(void *ctx, const void *data, size_t n, cf_error *err);

/* Encodes `data` (n elements of `elem` bytes) against `base` (the same size) into `sink`.
 * `level` is zstd's. *stored gets the encoded size. */
int cf_delta_encode(const void *data, const void *base, int64_t n, int elem, int level, cf_delta_sink sink, void *ctx,
                    uint64_t *stored, cf_error *err);

/* Decodes `stored` bytes of an encoding of n elements of `elem` bytes against `base` into
 * `out`. -1 with err (naming `what`) when the encoding is corrupt or has the wrong size. */
int cf_delta_decode(const void *encoded, size_t stored, const void *base, int64_t n, int elem, void *out,
                    const char *what, cf_error *err);

/* The encoded size of each byte plane alone (plane_bytes[elem]), for reports of where a
 * delta's bytes go. */
void cf_delta_plane_sizes(const void *data, const void *base, int64_t n, int elem, int level, uint64_t *plane_bytes);

#endif
