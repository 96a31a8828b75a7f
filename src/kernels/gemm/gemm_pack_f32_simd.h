/* The f32 packing loops of gemm_pack_avx512.c and gemm_pack_avx2.c, written once over a
 * small vector vocabulary that the including file defines first (layout in gemm_pack.c):
 *   PACK_LANES           floats per vector
 *   pack_vec, pack_mask  the vector and lane-mask types
 *   pack_lanes(n)        the mask of the first n lanes (n clamped to 0 .. PACK_LANES)
 *   pack_load(m, p)      masked load, zero in the other lanes
 *   pack_load_bf16(n, p) the first n (clamped to 0 .. PACK_LANES) bf16 at p widened to f32, zero
 *                        in the other lanes
 *   pack_store(p, m, v)  masked store
 *   pack_zero()          a zero vector
 *   pack_transpose(r)    r[i] = row i of a PACK_LANES-square block; on return r[k] holds column k
 * Missing lines and the padding slots of a panel are written as zeros. Each loop takes f32 or
 * (BF16) bf16 sources, widened as they are loaded: bf16 weights in the f32 kernels (where
 * vdpbf16ps is missing or slow, cf_bf16_unit_active) pack at the f32 rate; element by element
 * the widening had taken 30% of a 512-token bf16 prefill of the 110M LLaMA. */
#ifndef CFORMERS_GEMM_PACK_F32_SIMD_H
#define CFORMERS_GEMM_PACK_F32_SIMD_H

#include <stdbool.h>
#include <stdint.h>

/* PACK_LANES lanes from element `at` of src (f32, or bf16 widened), n of them present. */
static inline __attribute__((always_inline)) pack_vec pack_load_any(const void *src, long at, long n, const int BF16) {
    if (BF16) return pack_load_bf16(n, (const uint16_t *)src + at);
    return pack_load(pack_lanes(n), (const float *)src + at);
}

/* Lines contiguous along k: PACK_LANES lines x PACK_LANES k per step through the registers. */
static inline __attribute__((always_inline)) void strip_transpose_of(const void *src, long s_line, int h, long K, int w,
                                                                     float *dst, const int BF16) {
    for (int i0 = 0; i0 < w; i0 += PACK_LANES) {
        pack_mask out = pack_lanes(w - i0);
        for (long k0 = 0; k0 < K; k0 += PACK_LANES) {
            pack_vec r[PACK_LANES];
            for (int i = 0; i < PACK_LANES; i++)
                r[i] = i0 + i < h ? pack_load_any(src, (i0 + i) * s_line + k0, K - k0, BF16) : pack_zero();
            pack_transpose(r);
            long kn = K - k0 < PACK_LANES ? K - k0 : PACK_LANES;
            for (long k = 0; k < kn; k++) pack_store(dst + (k0 + k) * w + i0, out, r[k]);
        }
    }
}
static void strip_transpose(const float *src, long s_line, int h, long K, int w, float *dst) {
    strip_transpose_of(src, s_line, h, K, w, dst, 0);
}
static void strip_transpose_bf16(const uint16_t *src, long s_line, int h, long K, int w, float *dst) {
    strip_transpose_of(src, s_line, h, K, w, dst, 1);
}

/* A k-major block (line i, k at src[i + k*s_k]): each source row is read in one run across
 * all panels (see gemm_internal.h), KMAJOR_CHUNK rows at a time, and within a chunk each
 * panel's slots are written in order. One row at a time scattered its writes over every
 * panel, and packing a 12-wide A block ran 1.8x slower (1.3 vs 0.7 cycles per element,
 * block 1020 x 512 in L2; 2.9x for 240 rows). */
enum { KMAJOR_CHUNK = 16 };

static inline __attribute__((always_inline)) void block_kmajor_of(const void *src, long s_k, long lines, long K, int w,
                                                                  float *dst, const int BF16) {
    long panels = (lines + w - 1) / w;
    for (long k0 = 0; k0 < K; k0 += KMAJOR_CHUNK) {
        long k1 = k0 + KMAJOR_CHUNK < K ? k0 + KMAJOR_CHUNK : K;
        for (long p = 0; p < panels; p++) {
            long first = p * w;
            for (int i0 = 0; i0 < w; i0 += PACK_LANES) {
                pack_mask out = pack_lanes(w - i0);
                long at = k0 * s_k + first + i0;
                float *d = dst + (p * K + k0) * w + i0;
                for (long k = k0; k < k1; k++, at += s_k, d += w)
                    pack_store(d, out, pack_load_any(src, at, lines - first - i0, BF16));
            }
        }
    }
}
static void block_kmajor(const float *src, long s_k, long lines, long K, int w, float *dst) {
    block_kmajor_of(src, s_k, lines, K, w, dst, 0);
}
static void block_kmajor_bf16(const uint16_t *src, long s_k, long lines, long K, int w, float *dst) {
    block_kmajor_of(src, s_k, lines, K, w, dst, 1);
}

#endif
