/* q8_0 and q4_0 decode products: the repacked weight layouts, the activation quantizer and
 * the portable kernels (matvec.h). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "infer/matvec.h"

void cf_matvec_q8_pack(const void *blocks, long rows, long in, void *mem, matvec_q8 *out) {
    long have = (in + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK, nb = matvec_q8_blocks(in);
    uint8_t *q = mem;
    cf_f16 *d = (cf_f16 *)(q + (size_t)rows * (size_t)nb * CF_Q8_0_BLOCK);
    const cf_block_q8_0 *src = blocks;
    uint8_t lo = 255; /* the least stored quant: 0 for a -128 (a min reduction, vectorized) */
    for (long r = 0; r < rows; r++)
        for (long b = 0; b < nb; b++) {
            uint8_t *dst = q + (r * nb + b) * CF_Q8_0_BLOCK;
            const cf_block_q8_0 *s = b < have ? &src[r * have + b] : NULL;
            if (!s) memset(dst, 128, CF_Q8_0_BLOCK);
            else
                for (int i = 0; i < CF_Q8_0_BLOCK; i++) {
                    uint8_t v = (uint8_t)(s->q[i] + 128);
                    dst[i] = v;
                    lo = v < lo ? v : lo;
                }
            d[r * nb + b] = s ? s->d : 0;
        }
    *out = (matvec_q8){.q = q, .d = d, .blocks = nb, .no_min = lo != 0};
}

void cf_matvec_quantize_x(const float *x, long in, void *scratch) {
    int8_t *q;
    int32_t *offsets;
    float *d;
    long blocks = matvec_x_parts(scratch, in, &q, &offsets, &d);
    for (long b = 0; b < blocks; b++) {
        const float *xb = x + b * CF_Q8_0_BLOCK;
        long left = in - b * CF_Q8_0_BLOCK;
        int n = left < 0 ? 0 : left < CF_Q8_0_BLOCK ? (int)left : CF_Q8_0_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < n; i++) amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
        /* a scale under FLT_MIN (a block of denormals) has no finite inverse: the block is 0 */
        float scale = amax / 127.0f >= FLT_MIN ? amax / 127.0f : 0.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < CF_Q8_0_BLOCK; i++) {
            int8_t v = i < n ? (int8_t)lrintf(fmaxf(-127.0f, fminf(127.0f, xb[i] * inv))) : 0; /* NaN: defined */
            q[b * CF_Q8_0_BLOCK + i] = v;
            sum += v;
        }
        matvec_x_block_done(offsets, d, blocks, b, scale, sum);
    }
}

void cf_matvec_q4_pack(const void *blocks, long rows, long in, void *mem, matvec_q4 *out) {
    long have = (in + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK, nb = matvec_q8_blocks(in);
    uint8_t *q = mem;
    cf_f16 *d = (cf_f16 *)(q + (size_t)rows * (size_t)nb * MATVEC_Q4_BLOCK_BYTES);
    const cf_block_q4_0 *src = blocks;
    for (long r = 0; r < rows; r++)
        for (long b = 0; b < nb; b += 2) {
            uint8_t *pair = q + (r * nb + b) * MATVEC_Q4_BLOCK_BYTES;
            int nib[2][CF_Q8_0_BLOCK];
            for (int h = 0; h < 2; h++) {
                const cf_block_q4_0 *s = b + h < have ? &src[r * have + b + h] : NULL;
                for (int j = 0; j < CF_Q8_0_BLOCK; j++)
                    nib[h][j] = s ? cf_q4_nibble(s->qs, j) : 8;
                d[r * nb + b + h] = s ? s->d : 0;
            }
            for (int j = 0; j < CF_Q8_0_BLOCK; j++) pair[j] = (uint8_t)(nib[0][j] | nib[1][j] << 4);
        }
    *out = (matvec_q4){.q = q, .d = d, .blocks = nb};
}

/* Element i of a repacked row: q8_0's stored q + 128, q4_0's nibble (see matvec_q4), as
 * the signed weight. */
static inline int weight_value(const uint8_t *row, long i, bool q4) {
    if (!q4) return row[i] - 128;
    long b = i / CF_Q8_0_BLOCK;
    uint8_t byte = row[b / 2 * 2 * MATVEC_Q4_BLOCK_BYTES + i % CF_Q8_0_BLOCK];
    return (b % 2 ? byte >> 4 : byte & 0xf) - 8;
}

/* Row r of either layout back to floats (the planes q, d of nb blocks a row). */
static void row_floats(const uint8_t *q, const cf_f16 *d, long nb, bool q4, long r, long in, float *dst) {
    const uint8_t *row = q + r * nb * (q4 ? MATVEC_Q4_BLOCK_BYTES : CF_Q8_0_BLOCK);
    for (long i = 0; i < in; i++) dst[i] = (float)weight_value(row, i, q4) * cf_f16_to_f32(d[r * nb + i / CF_Q8_0_BLOCK]);
}

/* The portable kernel of either layout: per block the exact int dot, times d_w * d_x. */
static void rows_scalar(const uint8_t *wq, const cf_f16 *wd, long nb, bool q4, const void *xq, float *y, long r0,
                        long r1, long in) {
    const int8_t *q = xq;
    const float *d = matvec_x_scales(xq, in);
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = wq + r * nb * (q4 ? MATVEC_Q4_BLOCK_BYTES : CF_Q8_0_BLOCK);
        float s = 0.0f;
        for (long b = 0; b < nb; b++) {
            int32_t dot = 0;
            for (int i = 0; i < CF_Q8_0_BLOCK; i++)
                dot += weight_value(row, b * CF_Q8_0_BLOCK + i, q4) * q[b * CF_Q8_0_BLOCK + i];
            s += cf_f16_to_f32(wd[r * nb + b]) * d[b] * (float)dot;
        }
        y[r] = s;
    }
}

void cf_matvec_q8_row(const matvec_q8 *w, long r, long in, float *dst) { row_floats(w->q, w->d, w->blocks, false, r, in, dst); }
void cf_matvec_q4_row(const matvec_q4 *w, long r, long in, float *dst) { row_floats(w->q, w->d, w->blocks, true, r, in, dst); }

void cf_matvec_q8_rows_scalar(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    const matvec_q8 *m = w;
    rows_scalar(m->q, m->d, m->blocks, false, xq, y, r0, r1, in);
}
void cf_matvec_q4_rows_scalar(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    const matvec_q4 *m = w;
    rows_scalar(m->q, m->d, m->blocks, true, xq, y, r0, r1, in);
}
