/* q8_0 and q4_0 decode kernels for AVX-512 VNNI (matvec.h's repacked layouts). One vpdpbusd
 * takes a 64-byte load of a row: two q8_0 blocks (q + 128, unsigned) or, split by a mask and
 * a shift into its low and high nibbles (0..15, unsigned), two pairs of q4_0 blocks; times
 * x's quants (signed), started from x's offset share (q8_0: -128 * sum(q_x), q4_0:
 * -8 * sum(q_x), in the first lane of each block), so each block's 8 int32 lanes sum to
 * exactly its dot product. The scales of 16 blocks (a window) are one load and one multiply
 * per row and input; a permute spreads them over their blocks' lanes. Rows come in groups
 * of MATVEC_ROWS sharing each load of x. q4_0 against the AVX2 kernel AVX-512 CPUs ran
 * before (bench_matvec, one thread, GB/s per CPU second, 3 alternating runs on the 2-core
 * Xeon VM): in cache 13.2-15.0 -> 17.5-20.5, from memory 10.1-13.9 -> 11.5-17.9. */
#include <immintrin.h>

#include "infer/matvec.h"

enum { WINDOW = 16, TILE_ROWS = MATVEC_ROWS, TILE_INPUTS = 4 };

/* One step of a tile: blocks b = w0 + j.. of every row (q8_0: 2 blocks, q4_0: 4, or 2 at the
 * end of a window whose block count is not a multiple of 4: HALF, the load's upper half
 * masked off and its lanes' scales zero). The lanes of a q8_0 load hold blocks j and j + 1
 * of the window (8 each); a q4_0 load's low nibbles blocks j and j + 2, its high ones j + 1
 * and j + 3, so x's quants and offsets are rearranged to match (a 128-bit-lane shuffle per
 * input, shared by the rows). */
static inline __attribute__((always_inline)) void vnni_step(const uint8_t *const *row, const uint8_t *const *ahead,
                                                            const int8_t *const *q, const int32_t *const *off,
                                                            __m512 (*scale)[TILE_INPUTS], __m512 (*acc)[TILE_INPUTS],
                                                            long w0, long j, const int R, const int N, const int Q4,
                                                            const int HALF) {
    const long block_bytes = Q4 ? MATVEC_Q4_BLOCK_BYTES : CF_Q8_0_BLOCK, b = w0 + j;
    const __m512i first = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, Q4 ? 2 : 1, Q4 ? 2 : 1, Q4 ? 2 : 1, Q4 ? 2 : 1,
                                            Q4 ? 2 : 1, Q4 ? 2 : 1, Q4 ? 2 : 1, Q4 ? 2 : 1);
    const __m512i lanes_lo = _mm512_add_epi32(first, _mm512_set1_epi32((int)j));
    const __m512i lanes_hi = _mm512_add_epi32(lanes_lo, _mm512_set1_epi32(1)); /* q4_0 only */
    const __mmask16 live = HALF ? 0x00ff : 0xffff;
    __m512i xlo[TILE_INPUTS], xhi[TILE_INPUTS], slo[TILE_INPUTS], shi[TILE_INPUTS];
    for (int t = 0; t < N; t++) {
        __m512i x01 = _mm512_loadu_si512(q[t] + b * CF_Q8_0_BLOCK), o01 = _mm512_loadu_si512(off[t] + b * 8);
        if (Q4) {
            __m512i x23 = HALF ? _mm512_setzero_si512() : _mm512_loadu_si512(q[t] + (b + 2) * CF_Q8_0_BLOCK);
            __m512i o23 = HALF ? _mm512_setzero_si512() : _mm512_loadu_si512(off[t] + (b + 2) * 8);
            xlo[t] = _mm512_shuffle_i64x2(x01, x23, 0x44), xhi[t] = _mm512_shuffle_i64x2(x01, x23, 0xee);
            slo[t] = _mm512_shuffle_i64x2(o01, o23, 0x44), shi[t] = _mm512_shuffle_i64x2(o01, o23, 0xee);
        } else {
            xlo[t] = x01, slo[t] = o01;
        }
    }
    for (int k = 0; k < R; k++) {
        _mm_prefetch((const char *)(ahead[k] + b * block_bytes), _MM_HINT_T1);
        const uint8_t *p = row[k] + b * block_bytes;
        __m512i raw = HALF ? _mm512_maskz_loadu_epi8(0xffffffffull, p) : _mm512_loadu_si512(p);
        if (Q4) {
            const __m512i low = _mm512_set1_epi8(0x0f);
            __m512i wlo = _mm512_and_si512(raw, low), whi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
            for (int t = 0; t < N; t++) {
                __m512i dlo = _mm512_dpbusd_epi32(slo[t], wlo, xlo[t]), dhi = _mm512_dpbusd_epi32(shi[t], whi, xhi[t]);
                acc[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dlo), _mm512_maskz_permutexvar_ps(live, lanes_lo, scale[k][t]),
                                            acc[k][t]);
                acc[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dhi), _mm512_maskz_permutexvar_ps(live, lanes_hi, scale[k][t]),
                                            acc[k][t]);
            }
        } else {
            for (int t = 0; t < N; t++) {
                __m512i dot = _mm512_dpbusd_epi32(slo[t], raw, xlo[t]);
                acc[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(lanes_lo, scale[k][t]), acc[k][t]);
            }
        }
    }
}

/* A tile of R rows by N inputs of q8_0 or (Q4) q4_0 weights. Each output is summed the same
 * way whatever the tile (the same per-step products, scales and multiply-adds in the same
 * order), so bit for bit the one-input kernel's. Accumulators and scales are R x N registers
 * each (and q4_0 keeps 4 rearranged vectors per input), which bounds the tiles: one input
 * over 4 rows, up to 4 inputs over 2 rows (q8_0) or 1 (q4_0). */
static inline __attribute__((always_inline)) void vnni_tile(const void *w, const void *xv, long x_stride, float *y,
                                                            long ys, long r0, long r1, long in, const int R,
                                                            const int N, const int Q4) {
    matvec_q8 m = matvec_q_planes(w, Q4);
    const long block_bytes = Q4 ? MATVEC_Q4_BLOCK_BYTES : CF_Q8_0_BLOCK, step = Q4 ? 4 : 2;
    long nb = m.blocks, row_bytes = nb * block_bytes;
    long dist = matvec_ahead_rows(nb * (Q4 ? CF_Q4_0_BLOCK_BYTES : CF_Q8_0_BLOCK_BYTES));
    const int8_t *q[TILE_INPUTS];
    const int32_t *off[TILE_INPUTS];
    const float *dx[TILE_INPUTS];
    for (int t = 0; t < N; t++) {
        q[t] = (const int8_t *)((const char *)xv + t * x_stride);
        off[t] = Q4 ? matvec_x_q4_offsets(q[t], in) : matvec_x_offsets(q[t], in), dx[t] = matvec_x_scales(q[t], in);
    }
    MATVEC_PREFETCH_START(m.q, r0, r1, row_bytes, dist)
    MATVEC_Q8_PREFETCH_SCALES(&m, r0, r0 + dist < r1 ? r0 + dist : r1)
    for (long r = r0; r < r1; r += R) {
        const uint8_t *row[TILE_ROWS], *ahead[TILE_ROWS];
        MATVEC_TILE_ROWS(row, ahead, m.q, r, r1, row_bytes, dist, R)
        if (r + dist < r1) MATVEC_Q8_PREFETCH_SCALES(&m, r + dist, r + dist + R < r1 ? r + dist + R : r1)
        const cf_f16 *d[TILE_ROWS];
        __m512 acc[TILE_ROWS][TILE_INPUTS];
        for (int k = 0; k < R; k++) {
            d[k] = m.d + (row[k] - m.q) / block_bytes;
            for (int t = 0; t < N; t++) acc[k][t] = _mm512_setzero_ps();
        }
        for (long w0 = 0; w0 < nb; w0 += WINDOW) {
            long wn = nb - w0 < WINDOW ? nb - w0 : WINDOW; /* even */
            __mmask16 mask = (__mmask16)(wn == WINDOW ? 0xffffu : (1u << wn) - 1);
            __m512 scale[TILE_ROWS][TILE_INPUTS];
            for (int k = 0; k < R; k++) {
                __m512 dw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, d[k] + w0));
                for (int t = 0; t < N; t++) scale[k][t] = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(mask, dx[t] + w0));
            }
            long j = 0;
            for (; j + step <= wn; j += step) vnni_step(row, ahead, q, off, scale, acc, w0, j, R, N, Q4, 0);
            if (j < wn) vnni_step(row, ahead, q, off, scale, acc, w0, j, R, N, Q4, 1); /* q4_0: 2 blocks left */
        }
        for (int k = 0; k < R && r + k < r1; k++)
            for (int t = 0; t < N; t++) y[t * ys + r + k] = _mm512_reduce_add_ps(acc[k][t]);
    }
}

void cf_matvec_q8_rows_avx512vnni(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    vnni_tile(w, xq, 0, y, 0, r0, r1, in, MATVEC_ROWS, 1, 0);
}
void cf_matvec_q4_rows_avx512vnni(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    vnni_tile(w, xq, 0, y, 0, r0, r1, in, MATVEC_ROWS, 1, 1);
}

/* Several inputs at once (matvec.h's matvec_rowsn_fn). */
static inline __attribute__((always_inline)) void q8_tile(const void *w, const void *x, long xs, float *y, long ys,
                                                          long r0, long r1, long in, const int N) {
    vnni_tile(w, x, xs, y, ys, r0, r1, in, 2, N, 0);
}
MATVEC_ROWSN_TABLE_2_TO_4(cf_matvec_q8_rowsn_avx512vnni, q8_tile)
static inline __attribute__((always_inline)) void q4_tile(const void *w, const void *x, long xs, float *y, long ys,
                                                          long r0, long r1, long in, const int N) {
    vnni_tile(w, x, xs, y, ys, r0, r1, in, 1, N, 1);
}
MATVEC_ROWSN_TABLE_2_TO_4(cf_matvec_q4_rowsn_avx512vnni, q4_tile)
