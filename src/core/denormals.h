/* Denormal floats as zero (MXCSR's DAZ and FTZ bits, per thread): the mode the engine
 * computes in.
 *
 * On x86 every arithmetic instruction that meets a denormal operand (below 2^-126) or
 * produces one takes a microcode assist of ~100 cycles, for the whole vector. One
 * denormal weight in a thousand made a 1024^3 f32 product 4x slower here (103.5 ->
 * 25.8 GFLOP/s; one in a hundred: 30x; OpenBLAS and oneDNN slow down alike, 98 -> 40 and
 * 102 -> 27), and AdamW over a parameter block whose dormant half had moments in the
 * denormal range took 3x as long (docs/training.md). Such values do reach the engine:
 * converted checkpoints, weights decayed towards zero, tiny gradients, the moments of
 * embedding rows no batch touches (m shrinks 10x every 22 steps with beta1 = 0.9). So
 * the engine's own work reads denormal inputs as zero and flushes denormal results to
 * zero, as the bf16 paths (AMX, vdpbf16ps) do anyway; a result then differs from exact
 * arithmetic by less than 2^-126 times the magnitudes that met in it.
 *
 * The mode is set on the thread that starts the work (a matrix product, a plan run, an
 * inference forward) and restored when it ends, so callers see no change; the pool's
 * workers run each job in the mode of the thread that dispatched it (threads.c), so
 * that covers every thread that takes part. */
#ifndef CFORMERS_CORE_DENORMALS_H
#define CFORMERS_CORE_DENORMALS_H

#include <immintrin.h>

enum { CF_MXCSR_DAZ = 1 << 6, CF_MXCSR_FTZ = 1 << 15 };

/* Sets DAZ and FTZ on the calling thread; returns the mode to restore. */
static inline unsigned cf_denormals_off(void) {
    unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | CF_MXCSR_DAZ | CF_MXCSR_FTZ);
    return saved;
}

static inline void cf_fp_mode_restore(unsigned saved) { _mm_setcsr(saved); }

#endif
