/* The small path's loop over its tiles (see gemm.c), written once for the ISA files that
 * include it. They define first:
 *   SMALL_MR, SMALL_NR    the tile: rows of A, columns of B
 *   SMALL_NARROW_MR, SMALL_NARROW_NR
 *                         the tile for strips of B at most SMALL_NARROW_NR wide
 *   small_tiles[m - 1]    the tile of m rows (a gemm_small_tile_fn): up to SMALL_MR rows
 *                         by SMALL_NR columns, up to SMALL_NARROW_MR by SMALL_NARROW_NR
 *   SMALL_STRIP           their transposing pack (gemm_internal.h's cf_gemm_strip_f32_*)
 * Column strips of B go outermost, each reused by every row tile from L1 or L2; no
 * blocking. A transposed B has each strip transposed into a panel first (K x SMALL_NR,
 * zero past N) in the thread's B buffer. */
#ifndef CFORMERS_GEMM_SMALL_H
#define CFORMERS_GEMM_SMALL_H

#include "gemm_internal.h"

#include <stdbool.h>
#include <stddef.h>

static void small(long m, long n, long k, float alpha, const float *a, long a_rs, long a_ks, const float *b, long ldb,
                  bool trans_b, float beta, float *c, long ldc) {
    float *panel = trans_b ? cf_gemm_scratch_b(sizeof(float) * SMALL_NR * (size_t)k) : NULL;
    for (long j0 = 0; j0 < n; j0 += SMALL_NR) {
        int width = (int)(n - j0 < SMALL_NR ? n - j0 : SMALL_NR);
        const float *strip = b + j0;
        long strip_ld = ldb;
        if (trans_b) {
            SMALL_STRIP(b + j0 * ldb, ldb, width, k, SMALL_NR, panel);
            strip = panel;
            strip_ld = SMALL_NR;
        }
        const long rows = width <= SMALL_NARROW_NR ? SMALL_NARROW_MR : SMALL_MR;
        for (long i0 = 0; i0 < m; i0 += rows)
            small_tiles[(m - i0 < rows ? m - i0 : rows) - 1](k, a + i0 * a_rs, a_rs, a_ks, strip, strip_ld,
                                                            c + i0 * ldc + j0, ldc, width, alpha, beta);
    }
}

#endif
