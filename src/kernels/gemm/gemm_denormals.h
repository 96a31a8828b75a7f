/* Denormal floats as zero inside a product (MXCSR's DAZ and FTZ bits, per thread).
 *
 * On x86 every arithmetic instruction that meets a denormal operand (below 2^-126) or
 * produces one takes a microcode assist of ~100 cycles, for the whole vector. One
 * denormal weight in a thousand made a 1024^3 f32 product 4x slower here (103.5 ->
 * 25.8 GFLOP/s; one in a hundred: 30x), and OpenBLAS and oneDNN slow down alike (98 ->
 * 40, 102 -> 27). Such values do reach the engine: converted checkpoints, weights
 * decayed towards zero, tiny gradients. So the GEMM reads denormal inputs as zero and
 * flushes denormal results to zero, as the bf16 paths (AMX, vdpbf16ps) already do; an
 * element then differs from exact arithmetic by less than K * 2^-126 * max|operand|.
 * Each thread that computes part of a product sets the bits for that part and restores
 * its own mode after, so callers see no change. */
#ifndef CFORMERS_GEMM_DENORMALS_H
#define CFORMERS_GEMM_DENORMALS_H

#include <immintrin.h>

enum { GEMM_MXCSR_DAZ = 1 << 6, GEMM_MXCSR_FTZ = 1 << 15 };

/* Sets DAZ and FTZ on the calling thread; returns the mode to restore. */
static inline unsigned gemm_denormals_off(void) {
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | GEMM_MXCSR_DAZ | GEMM_MXCSR_FTZ);
    return saved;
}

static inline void gemm_denormals_restore(unsigned saved) { _mm_setcsr(saved); }

#endif
