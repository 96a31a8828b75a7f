/* Internal: 1-bit packing of a chunk (at most CF_ONEBIT_CHUNK values) and its unpacking,
 * per instruction set: one f32 scale (the mean magnitude of x + e) then a sign bit per
 * value, bit i of byte i/8 (the same bytes from every kernel). Chosen once from cpuid. */
#ifndef CFORMERS_DIST_ONEBIT_H
#define CFORMERS_DIST_ONEBIT_H

#include <stdbool.h>
#include <stdint.h>

/* A chunk of CF_ONEBIT_CHUNK values travels as one f32 scale (their mean magnitude) and
 * one sign bit each: 68 bytes for 2 KiB, 30x fewer. */
enum { CF_ONEBIT_CHUNK = 512, CF_ONEBIT_CHUNK_BYTES = 4 + CF_ONEBIT_CHUNK / 8 };

/* Packs x + e into out and leaves in e what the packing lost (the error fed back). */
typedef void (*cf_onebit_pack_fn)(const float *x, float *e, int64_t n, unsigned char *out);
/* y = (or +=, with add) the packed values +-scale. */
typedef void (*cf_onebit_unpack_fn)(const unsigned char *in, int64_t n, float *y, bool add);

typedef struct cf_onebit_kernels {
    cf_onebit_pack_fn pack;
    cf_onebit_unpack_fn unpack;
} cf_onebit_kernels;

void cf_onebit_pack_generic(const float *x, float *e, int64_t n, unsigned char *out);
void cf_onebit_unpack_generic(const unsigned char *in, int64_t n, float *y, bool add);
void cf_onebit_pack_avx512(const float *x, float *e, int64_t n, unsigned char *out);
void cf_onebit_unpack_avx512(const unsigned char *in, int64_t n, float *y, bool add);

/* The scalar loops every kernel shares (all of the portable one, the tails of the
 * vector ones), over values [from, n) of a chunk. */
static inline double cf_onebit_abs_sum(const float *x, const float *e, int64_t from, int64_t n) {
    double sum = 0.0;
    for (int64_t i = from; i < n; i++) {
        float v = x[i] + e[i];
        sum += v < 0.0f ? -v : v;
    }
    return sum;
}

/* Sets the sign bits of x + e (bits cleared beforehand) and leaves in e what +-scale lost. */
static inline void cf_onebit_signs(const float *x, float *e, int64_t from, int64_t n, float scale, unsigned char *bits) {
    for (int64_t i = from; i < n; i++) {
        float v = x[i] + e[i];
        int positive = v >= 0.0f;
        bits[i >> 3] |= (unsigned char)(positive << (i & 7));
        e[i] = v - (positive ? scale : -scale);
    }
}

static inline void cf_onebit_expand(const unsigned char *bits, int64_t from, int64_t n, float scale, float *y, bool add) {
    for (int64_t i = from; i < n; i++) {
        float v = bits[i >> 3] >> (i & 7) & 1 ? scale : -scale;
        y[i] = add ? y[i] + v : v;
    }
}

/* The kernels for this machine. */
cf_onebit_kernels cf_onebit_kernels_for_cpu(void);

#endif
