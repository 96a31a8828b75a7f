/* q8_0 decode kernel for AVX-512 VNNI (matvec.h's repacked layout): one vpdpbusd takes two
 * whole blocks, weights (q + 128, unsigned) times x (signed), started from x's offset share
 * (-128 * sum(q_x) in the first lane of each block), so each block's 8 int32 lanes sum to
 * exactly sum(q_w * q_x). The scales of 16 blocks are one load and one multiply per row;
 * a permute spreads a pair's two over their lanes. Rows come in groups of MATVEC_ROWS
 * sharing each load of x. */
#include <immintrin.h>

#include "infer/matvec.h"

enum { ROWS = MATVEC_ROWS, WINDOW = 16 };

/* For pair p of a window: lanes 0-7 take scale 2p, lanes 8-15 scale 2p + 1. */
static const int32_t pair_lanes[WINDOW / 2][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

void matvec_q8_rows_avx512vnni(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    const matvec_q8 *m = w;
    long nb = m->blocks, row_bytes = nb * CF_Q8_0_BLOCK, dist = matvec_ahead_rows(nb * CF_Q8_0_BLOCK_BYTES);
    const int8_t *q = xq;
    const int32_t *offsets = matvec_x_offsets(xq, in);
    const float *dx = matvec_x_scales(xq, in);
    MATVEC_PREFETCH_START(m->q, r0, r1, row_bytes, dist)
    MATVEC_Q8_PREFETCH_SCALES(m, r0, r0 + dist < r1 ? r0 + dist : r1)
    for (long r = r0; r < r1; r += ROWS) {
        const uint8_t *row[ROWS], *ahead[ROWS];
        MATVEC_GROUP_ROWS(row, ahead, m->q, r, r1, row_bytes, dist)
        if (r + dist < r1) MATVEC_Q8_PREFETCH_SCALES(m, r + dist, r + dist + ROWS < r1 ? r + dist + ROWS : r1)
        const cf_f16 *d[ROWS];
        __m512 acc[ROWS];
        for (int k = 0; k < ROWS; k++) {
            d[k] = m->d + (row[k] - m->q) / CF_Q8_0_BLOCK;
            acc[k] = _mm512_setzero_ps();
        }
        for (long w0 = 0; w0 < nb; w0 += WINDOW) {
            long wn = nb - w0 < WINDOW ? nb - w0 : WINDOW; /* even */
            __mmask16 mask = (__mmask16)(wn == WINDOW ? 0xffffu : (1u << wn) - 1);
            __m512 sx = _mm512_maskz_loadu_ps(mask, dx + w0), scale[ROWS];
            for (int k = 0; k < ROWS; k++)
                scale[k] = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, d[k] + w0)), sx);
            for (long p = 0; p < wn / 2; p++) {
                long b = w0 + 2 * p;
                __m512i x = _mm512_loadu_si512(q + b * CF_Q8_0_BLOCK), start = _mm512_loadu_si512(offsets + b * 8);
                __m512i lanes = _mm512_loadu_si512(pair_lanes[p]);
                for (int k = 0; k < ROWS; k++) {
                    _mm_prefetch((const char *)(ahead[k] + b * CF_Q8_0_BLOCK), _MM_HINT_T1);
                    __m512i dot = _mm512_dpbusd_epi32(start, _mm512_loadu_si512(row[k] + b * CF_Q8_0_BLOCK), x);
                    acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(lanes, scale[k]), acc[k]);
                }
            }
        }
        for (int k = 0; k < ROWS && r + k < r1; k++) y[r + k] = _mm512_reduce_add_ps(acc[k]);
    }
}

/* Several inputs at once (matvec.h's matvec_rowsn_fn): a tile of Q_ROWS rows by N inputs,
 * each weight load serving N vpdpbusd. Each output is summed exactly as above (the same
 * per-pair products, scales and multiply-adds, in the same order), so bit for bit the
 * one-input kernel's. Accumulators and scales are R x N registers each, so 4 inputs over 2
 * rows are the widest tile. */
enum { Q_ROWS = 2, Q_INPUTS = 4 };
static inline __attribute__((always_inline)) void q8_tile(const void *w, const void *xv, long x_stride, float *y,
                                                          long ys, long r0, long r1, long in, const int N) {
    const matvec_q8 *m = w;
    long nb = m->blocks, row_bytes = nb * CF_Q8_0_BLOCK, dist = matvec_ahead_rows(nb * CF_Q8_0_BLOCK_BYTES);
    const int8_t *q[Q_INPUTS];
    const int32_t *offsets[Q_INPUTS];
    const float *dx[Q_INPUTS];
    for (int t = 0; t < N; t++) {
        q[t] = (const int8_t *)((const char *)xv + t * x_stride);
        offsets[t] = matvec_x_offsets(q[t], in), dx[t] = matvec_x_scales(q[t], in);
    }
    MATVEC_PREFETCH_START(m->q, r0, r1, row_bytes, dist)
    for (long r = r0; r < r1; r += Q_ROWS) {
        const uint8_t *row[Q_ROWS], *ahead[Q_ROWS];
        MATVEC_TILE_ROWS(row, ahead, m->q, r, r1, row_bytes, dist, Q_ROWS)
        const cf_f16 *d[Q_ROWS];
        __m512 acc[Q_ROWS][Q_INPUTS];
        for (int k = 0; k < Q_ROWS; k++) {
            d[k] = m->d + (row[k] - m->q) / CF_Q8_0_BLOCK;
            for (int t = 0; t < N; t++) acc[k][t] = _mm512_setzero_ps();
        }
        for (long w0 = 0; w0 < nb; w0 += WINDOW) {
            long wn = nb - w0 < WINDOW ? nb - w0 : WINDOW; /* even */
            __mmask16 mask = (__mmask16)(wn == WINDOW ? 0xffffu : (1u << wn) - 1);
            __m512 scale[Q_ROWS][Q_INPUTS];
            for (int k = 0; k < Q_ROWS; k++) {
                __m512 dw = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, d[k] + w0));
                for (int t = 0; t < N; t++) scale[k][t] = _mm512_mul_ps(dw, _mm512_maskz_loadu_ps(mask, dx[t] + w0));
            }
            for (long p = 0; p < wn / 2; p++) {
                long b = w0 + 2 * p;
                __m512i lanes = _mm512_loadu_si512(pair_lanes[p]), x[Q_INPUTS], start[Q_INPUTS];
                for (int t = 0; t < N; t++)
                    x[t] = _mm512_loadu_si512(q[t] + b * CF_Q8_0_BLOCK), start[t] = _mm512_loadu_si512(offsets[t] + b * 8);
                for (int k = 0; k < Q_ROWS; k++) {
                    _mm_prefetch((const char *)(ahead[k] + b * CF_Q8_0_BLOCK), _MM_HINT_T1);
                    __m512i wv = _mm512_loadu_si512(row[k] + b * CF_Q8_0_BLOCK);
                    for (int t = 0; t < N; t++) {
                        __m512i dot = _mm512_dpbusd_epi32(start[t], wv, x[t]);
                        acc[k][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(lanes, scale[k][t]),
                                                    acc[k][t]);
                    }
                }
            }
        }
        for (int k = 0; k < Q_ROWS && r + k < r1; k++)
            for (int t = 0; t < N; t++) y[t * ys + r + k] = _mm512_reduce_add_ps(acc[k][t]);
    }
}

MATVEC_ROWSN_TABLE_2_TO_4(matvec_q8_rowsn_avx512vnni, q8_tile)
