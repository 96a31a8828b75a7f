/* Checked size arithmetic for fields read from files (the one rule for untrusted sizes).
 *
 * Every size, count or offset that comes from a file, a header or a config goes through
 * these helpers before it sizes an allocation or forms a pointer: a product or sum that
 * wraps is an error, never a smaller number that passes the next bounds check. Each
 * returns true when the result is exact and stored in *out (false leaves *out as 0).
 *
 *   size_t bytes;
 *   if (!cf_mul_size(n_tokens, token_bytes, &bytes) || !cf_fits(offset, bytes, file_size))
 *       return cf_fail(err, "%s: chunk %d: %llu tokens do not fit in the file", ...);
 */
#ifndef CFORMERS_CORE_CHECKED_H
#define CFORMERS_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* a * b and a + b in size_t, false on overflow. */
static inline bool cf_mul_size(uint64_t a, uint64_t b, size_t *out) {
    size_t r;
    if (a > SIZE_MAX || b > SIZE_MAX || __builtin_mul_overflow((size_t)a, (size_t)b, &r)) {
        *out = 0;
        return false;
    }
    *out = r;
    return true;
}

static inline bool cf_add_size(uint64_t a, uint64_t b, size_t *out) {
    size_t r;
    if (a > SIZE_MAX || b > SIZE_MAX || __builtin_add_overflow((size_t)a, (size_t)b, &r)) {
        *out = 0;
        return false;
    }
    *out = r;
    return true;
}

/* a * b * c, false on overflow (shapes, tables). */
static inline bool cf_mul3_size(uint64_t a, uint64_t b, uint64_t c, size_t *out) {
    size_t ab;
    return cf_mul_size(a, b, &ab) && cf_mul_size(ab, c, out);
}

/* Whether the range [offset, offset + length) lies inside a file (or buffer) of `size`
 * bytes, computed without overflow. */
static inline bool cf_fits(uint64_t offset, uint64_t length, uint64_t size) {
    return offset <= size && length <= size - offset;
}

/* Whether count items of item_bytes each fit in `available` bytes: the bound on any count
 * read from a file before it sizes an allocation (a file cannot describe more items than
 * it has bytes for). item_bytes 0 counts as 1. */
static inline bool cf_count_fits(uint64_t count, uint64_t item_bytes, uint64_t available) {
    if (item_bytes == 0) item_bytes = 1;
    return count <= available / item_bytes;
}

#endif
