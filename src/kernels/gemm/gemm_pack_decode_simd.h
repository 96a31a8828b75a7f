/* The vectorized decode-in-packing of q8_0 / q4_0 weights in the forward x W^T (the
 * decode_trans operands of gemm_pack_decode.c: GGUF's blocks and the inference planes),
 * written once over gemm_pack_f32_simd.h's vocabulary (PACK_LANES, pack_vec, pack_lanes,
 * pack_store, pack_zero, pack_transpose), which the including file (gemm_pack_avx512.c,
 * gemm_pack_avx2.c) defines first, plus
 *   pack_quants(p, kind, shift, d)  PACK_LANES quants from p as f32 times the f16 scale d:
 *                                   kind as gemm_internal.h's GEMM_QUANTS_*
 * A panel is PACK_LANES stored rows x PACK_LANES k at a time: each row's quants decoded into
 * a vector, the square transposed in registers and stored k by k, as the f32 strips are.
 * Each element is the same single rounding of q * d as the portable decode, so the panels are
 * bit-identical to it. Before, element by element (decode_run, then a scatter by nr), the
 * packing of a 256-token q8_0 prefill of the 110M LLaMA took 25% of it against the
 * micro-kernel's 31% (perf, one thread). */
#ifndef CFORMERS_GEMM_PACK_DECODE_SIMD_H
#define CFORMERS_GEMM_PACK_DECODE_SIMD_H

#include "cformers/dtype.h"

/* PACK_LANES elements [k, k + PACK_LANES) of stored row s (k a multiple of PACK_LANES, so
 * within one block of 32, which is whole in memory: the run is read in bounds even past K). */
static inline __attribute__((always_inline)) pack_vec decode_lanes(const gemm_operand *src, long s, long k) {
    const uint8_t *row = (const uint8_t *)src->data + (size_t)s * src->row_bytes;
    long b = k / CF_Q8_0_BLOCK, j = k % CF_Q8_0_BLOCK;
    bool q8 = src->decode == CF_Q8_0;
    if (src->scales) { /* the inference planes (gemm_internal.h) */
        cf_f16 d = src->scales[s * src->scale_stride + b];
        if (q8) return pack_quants(row + k, GEMM_QUANTS_U8, 0, d);
        return pack_quants(row + b / 2 * CF_Q8_0_BLOCK + j, GEMM_QUANTS_NIBBLE, (int)(b % 2) * 4, d);
    }
    if (q8) { /* GGUF's blocks: the f16 scale, then the quants */
        const cf_block_q8_0 *blk = (const cf_block_q8_0 *)row + b;
        return pack_quants((const uint8_t *)blk->q + j, GEMM_QUANTS_S8, 0, blk->d);
    }
    const cf_block_q4_0 *blk = (const cf_block_q4_0 *)row + b; /* element j < 16 low nibble of qs[j], else high */
    return pack_quants(blk->qs + j % (CF_Q8_0_BLOCK / 2), GEMM_QUANTS_NIBBLE, j >= CF_Q8_0_BLOCK / 2 ? 4 : 0, blk->d);
}

/* The panel (nr columns, `rows` k steps from r0) of stored rows first .. first + h, as
 * cf_gemm_pack_b_decode writes it; false (nothing written) where this loop does not apply:
 * not q8_0 / q4_0 transposed, or r0 or nr not a multiple of PACK_LANES. */
static bool decode_strip_simd(const gemm_operand *src, long r0, long first, int h, long rows, int nr, float *dst) {
    if (!src->decode_trans || (src->decode != CF_Q8_0 && src->decode != CF_Q4_0) || r0 % PACK_LANES ||
        nr % PACK_LANES)
        return false;
    pack_mask all = pack_lanes(PACK_LANES);
    for (int i0 = 0; i0 < nr; i0 += PACK_LANES)
        for (long k0 = 0; k0 < rows; k0 += PACK_LANES) {
            pack_vec r[PACK_LANES];
            for (int i = 0; i < PACK_LANES; i++)
                r[i] = i0 + i < h ? decode_lanes(src, first + i0 + i, r0 + k0) : pack_zero();
            pack_transpose(r);
            long kn = rows - k0 < PACK_LANES ? rows - k0 : PACK_LANES;
            for (long k = 0; k < kn; k++) pack_store(dst + (k0 + k) * nr + i0, all, r[k]);
        }
    return true;
}

#endif
