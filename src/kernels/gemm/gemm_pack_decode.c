/* Packing of B blocks from weights stored in f16, q8_0 or q4_0 (frozen weights,
 * cf_gemm_weight): each element is decoded into the f32 panel as it is packed, exactly as
 * cf_dtype_to_f32 decodes it (q8_0 w = f16(d) * q, q4_0 w = (nibble - 8) * f16(d)), so a
 * product over the stored weight equals the product over its f32 copy, and no f32 copy of
 * the whole weight is ever made. The layout written is gemm_pack.c's f32 B panels:
 *   dst[p*nr*K + k*nr + j] = B(k, p*nr + j), zero past the block's columns.
 * Stored row s, column t of the weight is element (t, s) of op(B) with decode_trans (the
 * forward x W^T over [out, in] rows), else (s, t) (the backward's dY W). */
#include "gemm_internal.h"

#include <string.h>

/* Elements [start, start + n) of one stored row, as f32. */
static void decode_run(cf_dtype t, const uint8_t *row, long start, long n, float *out) {
    switch (t) {
    case CF_F16: cf_convert_f16_to_f32((const cf_f16 *)row + start, out, (size_t)n); return;
    case CF_BF16: cf_convert_bf16_to_f32((const cf_bf16 *)row + start, out, (size_t)n); return;
    case CF_Q8_0:
    case CF_Q4_0: {
        bool q8 = t == CF_Q8_0;
        const cf_block_q8_0 *b8 = (const cf_block_q8_0 *)row;
        const cf_block_q4_0 *b4 = (const cf_block_q4_0 *)row;
        for (long i = 0; i < n;) {
            long e = start + i, blk = e / CF_Q8_0_BLOCK;
            int off = (int)(e % CF_Q8_0_BLOCK), len = CF_Q8_0_BLOCK - off;
            if (len > n - i) len = (int)(n - i);
            if (q8) {
                float d = cf_f16_to_f32(b8[blk].d);
                for (int j = 0; j < len; j++) out[i + j] = d * (float)b8[blk].q[off + j];
            } else {
                float d = cf_f16_to_f32(b4[blk].d);
                for (int j = 0; j < len; j++) out[i + j] = (float)(cf_q4_nibble(b4[blk].qs, off + j) - 8) * d;
            }
            i += len;
        }
        return;
    }
    default: memcpy(out, (const float *)row + start, sizeof(float) * (size_t)n); return;
    }
}

/* Elements [start, start + n) of stored row s of a weight in the inference planes
 * (gemm_operand.scales), as f32: (q - 128) * d for q8_0, (nibble - 8) * d for q4_0, as
 * cf_matvec_q8_row / cf_matvec_q4_row decode them. A block at a time, in loops of constant
 * shape the compiler vectorizes. */
static void decode_planes(const gemm_operand *src, long s, long start, long n, float *out) {
    const uint8_t *row = (const uint8_t *)src->data + (size_t)s * src->row_bytes;
    const cf_f16 *scales = src->scales + s * src->scale_stride;
    bool q8 = src->decode == CF_Q8_0;
    for (long i = 0; i < n;) {
        long e = start + i, blk = e / CF_Q8_0_BLOCK;
        int off = (int)(e % CF_Q8_0_BLOCK), len = CF_Q8_0_BLOCK - off;
        if (len > n - i) len = (int)(n - i);
        float d = cf_f16_to_f32(scales[blk]), *o = out + i;
        if (q8) {
            const uint8_t *q = row + blk * CF_Q8_0_BLOCK + off;
            for (int j = 0; j < len; j++) o[j] = (float)((int)q[j] - 128) * d;
        } else { /* byte j of the pair holds element j of its first block (low) and second (high) */
            const uint8_t *q = row + blk / 2 * CF_Q8_0_BLOCK + off;
            int shift = blk % 2 ? 4 : 0;
            for (int j = 0; j < len; j++) o[j] = (float)((q[j] >> shift & 0xf) - 8) * d;
        }
        i += len;
    }
}

static const uint8_t *stored_row(const gemm_operand *src, long s) {
    return (const uint8_t *)src->data + (size_t)s * src->row_bytes;
}

/* Elements [start, start + n) of stored row s, as f32, in either layout. */
static void decode_row(const gemm_operand *src, long s, long start, long n, float *out) {
    if (src->scales) decode_planes(src, s, start, n, out);
    else decode_run(src->decode, stored_row(src, s), start, n, out);
}

enum { RUN = 256 }; /* k values decoded at a time for the forward's scatter */

void cf_gemm_pack_b_decode(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, float *dst,
                           gemm_decode_strip_fn strip) {
    for (long p = 0; p * nr < cols; p++) {
        long first = c0 + p * nr;
        int h = (int)(cols - p * nr < nr ? cols - p * nr : nr);
        float *panel = dst + p * nr * rows;
        if (strip && strip(src, r0, first, h, rows, nr, panel)) continue;
        if (src->decode_trans) { /* column j of the panel is stored row first + j, along k */
            float run[RUN];
            for (int j = 0; j < h; j++) {
                for (long k0 = 0; k0 < rows; k0 += RUN) {
                    long n = rows - k0 < RUN ? rows - k0 : RUN;
                    decode_row(src, first + j, r0 + k0, n, run);
                    for (long k = 0; k < n; k++) panel[(k0 + k) * nr + j] = run[k];
                }
            }
            if (h < nr)
                for (long k = 0; k < rows; k++) memset(panel + k * nr + h, 0, sizeof(float) * (size_t)(nr - h));
        } else { /* step k of the panel is a run of stored row r0 + k */
            for (long k = 0; k < rows; k++) {
                decode_row(src, r0 + k, first, h, panel + k * nr);
                if (h < nr) memset(panel + k * nr + h, 0, sizeof(float) * (size_t)(nr - h));
            }
        }
    }
}
