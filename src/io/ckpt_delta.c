/* Differential tensor encoding: XOR against the base, byte planes per block, zstd. */
#include "io/ckpt_delta.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

/* Block [i0, i0 + m) of data ^ base, plane-major, into planes (m * elem bytes). */
static void to_planes(const unsigned char *data, const unsigned char *base, int64_t i0, int64_t m, int elem,
                      unsigned char *planes) {
    const unsigned char *d = data + i0 * elem, *b = base + i0 * elem;
    for (int k = 0; k < elem; k++) {
        unsigned char *p = planes + (int64_t)k * m;
        for (int64_t i = 0; i < m; i++) p[i] = d[i * elem + k] ^ b[i * elem + k];
    }
}

static void from_planes(const unsigned char *planes, const unsigned char *base, int64_t i0, int64_t m, int elem,
                        unsigned char *out) {
    const unsigned char *b = base + i0 * elem;
    unsigned char *o = out + i0 * elem;
    for (int k = 0; k < elem; k++) {
        const unsigned char *p = planes + (int64_t)k * m;
        for (int64_t i = 0; i < m; i++) o[i * elem + k] = p[i] ^ b[i * elem + k];
    }
}

int cf_delta_encode(const void *data, const void *base, int64_t n, int elem, int level, cf_delta_sink sink, void *ctx,
                    uint64_t *stored, cf_error *err) {
    ZSTD_CCtx *z = ZSTD_createCCtx();
    size_t out_size = ZSTD_CStreamOutSize();
    unsigned char *planes = cf_xmalloc((size_t)CF_DELTA_BLOCK * (size_t)elem), *out = cf_xmalloc(out_size);
    ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, level);
    int rc = 0;
    *stored = 0;
    for (int64_t i0 = 0; rc == 0 && (i0 < n || i0 == 0); i0 += CF_DELTA_BLOCK) {
        int64_t m = n - i0 < CF_DELTA_BLOCK ? n - i0 : CF_DELTA_BLOCK;
        to_planes(data, base, i0, m, elem, planes);
        bool last = i0 + m >= n;
        ZSTD_inBuffer in = {planes, (size_t)(m * elem), 0};
        for (;;) {
            ZSTD_outBuffer o = {out, out_size, 0};
            size_t left = ZSTD_compressStream2(z, &o, &in, last ? ZSTD_e_end : ZSTD_e_continue);
            if (ZSTD_isError(left)) {
                rc = cf_fail(err, "zstd: %s", ZSTD_getErrorName(left));
                break;
            }
            if (o.pos && (rc = sink(ctx, out, o.pos, err)) != 0) break;
            *stored += o.pos;
            if (last ? left == 0 : in.pos == in.size) break;
        }
        if (last) break;
    }
    free(planes);
    free(out);
    ZSTD_freeCCtx(z);
    return rc;
}

int cf_delta_decode(const void *encoded, size_t stored, const void *base, int64_t n, int elem, void *out,
                    const char *what, cf_error *err) {
    ZSTD_DCtx *z = ZSTD_createDCtx();
    unsigned char *planes = cf_xmalloc((size_t)CF_DELTA_BLOCK * (size_t)elem);
    ZSTD_inBuffer in = {encoded, stored, 0};
    size_t left = 1;
    int rc = 0;
    for (int64_t i0 = 0; i0 < n && rc == 0; i0 += CF_DELTA_BLOCK) {
        int64_t m = n - i0 < CF_DELTA_BLOCK ? n - i0 : CF_DELTA_BLOCK;
        ZSTD_outBuffer o = {planes, (size_t)(m * elem), 0};
        while (o.pos < o.size) {
            size_t before_in = in.pos, before_out = o.pos;
            left = ZSTD_decompressStream(z, &o, &in);
            if (ZSTD_isError(left)) {
                rc = cf_fail(err, "%s: corrupt difference data (zstd: %s)", what, ZSTD_getErrorName(left));
                break;
            }
            if (in.pos == before_in && o.pos == before_out) {
                rc = cf_fail(err, "%s: difference data ends after %lld of %lld elements", what,
                             (long long)(i0 + (int64_t)o.pos / elem), (long long)n);
                break;
            }
        }
        if (rc == 0) from_planes(planes, base, i0, m, elem, out);
    }
    if (rc == 0 && n > 0 && (left != 0 || in.pos != stored))
        rc = cf_fail(err, "%s: difference data is longer than its %lld elements", what, (long long)n);
    free(planes);
    ZSTD_freeDCtx(z);
    return rc;
}

void cf_delta_plane_sizes(const void *data, const void *base, int64_t n, int elem, int level, uint64_t *plane_bytes) {
    unsigned char *planes = cf_xmalloc((size_t)CF_DELTA_BLOCK * (size_t)elem);
    size_t bound = ZSTD_compressBound(CF_DELTA_BLOCK);
    unsigned char *out = cf_xmalloc(bound);
    ZSTD_CCtx *z = ZSTD_createCCtx();
    for (int k = 0; k < elem; k++) plane_bytes[k] = 0;
    for (int64_t i0 = 0; i0 < n; i0 += CF_DELTA_BLOCK) {
        int64_t m = n - i0 < CF_DELTA_BLOCK ? n - i0 : CF_DELTA_BLOCK;
        to_planes(data, base, i0, m, elem, planes);
        for (int k = 0; k < elem; k++) {
            size_t got = ZSTD_compressCCtx(z, out, bound, planes + (int64_t)k * m, (size_t)m, level);
            plane_bytes[k] += ZSTD_isError(got) ? (uint64_t)m : got;
        }
    }
    ZSTD_freeCCtx(z);
    free(out);
    free(planes);
}
