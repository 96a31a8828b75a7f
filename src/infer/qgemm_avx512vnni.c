/* The int8 GEMM of prompt chunks over q8_0 / q4_0 weights with AVX-512 VNNI (matvec.h's
 * cf_matvec_q_gemm_fn): the matvec's arithmetic (x quantized per block of 32, per block
 * d_w x d_x x the exact int dot, summed over the blocks in order in f32: the portable rows
 * kernel's sums, bit for bit) at a GEMM's reuse. The weight is packed a panel of 32 rows at
 * a time, per block of 32 and 4 consecutive k: 32 rows x 4 quants, 128 bytes (q8_0 q + 128,
 * q4_0 its nibble, both unsigned), with the panel's f32 scales per block; a tile is up to 6
 * inputs x the 32 rows, each step one vpdpbusd per input and 16 rows, x's 4 quants
 * broadcast, the int32 sums started from x's offset share (-128 or -8 x sum(q_x)). Panels
 * are the pool's tasks, each packed into its thread's buffer and run against every input. */
#include <immintrin.h>
#include <string.h>

#include "cformers/threads.h"
#include "cformers/error.h"
#include "infer/matvec.h"

enum { PANEL = 32, TILE_M = 6, GROUPS = CF_Q8_0_BLOCK / 4 };

typedef struct qgemm_job {
    matvec_q8 w; /* the planes (q4_0's as matvec_q_planes gives them) */
    bool q4;
    const char *x; /* n inputs quantized (cf_matvec_quantize_x), x_stride bytes apart */
    long x_stride, n, in, out;
    float *y;
    long ldy;
    uint8_t *buffers; /* panel_bytes per thread */
    size_t panel_bytes;
} qgemm_job;

/* Rows [j0, j0 + 32) of the weight into the panel: quants [blocks][GROUPS][32][4], then f32
 * scales [blocks][32]; rows past `out` are zero with scale 0. */
static void pack_panel(const qgemm_job *j, long j0, uint8_t *panel) {
    long nb = j->w.blocks;
    uint32_t *q = (uint32_t *)panel;
    float *d = (float *)(panel + (size_t)nb * CF_Q8_0_BLOCK * PANEL);
    for (int r = 0; r < PANEL; r++) {
        long row = j0 + r;
        if (row >= j->out) {
            for (long b = 0; b < nb; b++) {
                for (int g = 0; g < GROUPS; g++) q[(b * GROUPS + g) * PANEL + r] = 0;
                d[b * PANEL + r] = 0.0f;
            }
            continue;
        }
        const uint8_t *src = j->w.q + row * nb * (j->q4 ? MATVEC_Q4_BLOCK_BYTES : CF_Q8_0_BLOCK);
        for (long b = 0; b < nb; b++) {
            d[b * PANEL + r] = cf_f16_to_f32(j->w.d[row * nb + b]);
            for (int g = 0; g < GROUPS; g++) {
                uint32_t v;
                if (j->q4) { /* byte i of the pair: block b's element i in the low nibble when b is even */
                    memcpy(&v, src + b / 2 * CF_Q8_0_BLOCK + g * 4, 4);
                    v = (v >> (b % 2 * 4)) & 0x0f0f0f0fu;
                } else {
                    memcpy(&v, src + b * CF_Q8_0_BLOCK + g * 4, 4);
                }
                q[(b * GROUPS + g) * PANEL + r] = v;
            }
        }
    }
}

/* y rows [i0, i0 + M) x the panel's columns [j0, j0 + cols) (cols <= 32). */
static inline __attribute__((always_inline)) void tile(const qgemm_job *j, const uint8_t *panel, long i0, long j0,
                                                       int cols, const int M) {
    long nb = j->w.blocks;
    const uint8_t *pq = panel;
    const float *pd = (const float *)(panel + (size_t)nb * CF_Q8_0_BLOCK * PANEL);
    const int8_t *xq[TILE_M];
    const int32_t *xo[TILE_M];
    const float *xd[TILE_M];
    for (int i = 0; i < M; i++) {
        const char *x = j->x + (i0 + i) * j->x_stride;
        xq[i] = (const int8_t *)x;
        xo[i] = j->q4 ? matvec_x_q4_offsets(x, j->in) : matvec_x_offsets(x, j->in);
        xd[i] = matvec_x_scales(x, j->in);
    }
    __m512 acc[TILE_M][2];
    for (int i = 0; i < M; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (long b = 0; b < nb; b++) {
        __m512i s[TILE_M][2];
        for (int i = 0; i < M; i++) s[i][0] = s[i][1] = _mm512_set1_epi32(xo[i][b * 8]);
        const uint8_t *wb = pq + b * CF_Q8_0_BLOCK * PANEL;
        for (int g = 0; g < GROUPS; g++) {
            __m512i w0 = _mm512_loadu_si512(wb + g * 4 * PANEL), w1 = _mm512_loadu_si512(wb + g * 4 * PANEL + 64);
            for (int i = 0; i < M; i++) {
                int32_t x4;
                memcpy(&x4, xq[i] + b * CF_Q8_0_BLOCK + g * 4, 4);
                __m512i xb = _mm512_set1_epi32(x4);
                s[i][0] = _mm512_dpbusd_epi32(s[i][0], w0, xb);
                s[i][1] = _mm512_dpbusd_epi32(s[i][1], w1, xb);
            }
        }
        __m512 d0 = _mm512_loadu_ps(pd + b * PANEL), d1 = _mm512_loadu_ps(pd + b * PANEL + 16);
        for (int i = 0; i < M; i++) { /* acc + (d_w * d_x) * dot, rounded as the portable kernel rounds */
            __m512 dx = _mm512_set1_ps(xd[i][b]);
            acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_mul_ps(_mm512_mul_ps(d0, dx), _mm512_cvtepi32_ps(s[i][0])));
            acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_mul_ps(_mm512_mul_ps(d1, dx), _mm512_cvtepi32_ps(s[i][1])));
        }
    }
    __mmask16 m0 = (__mmask16)(cols >= 16 ? 0xffff : (1u << cols) - 1);
    __mmask16 m1 = (__mmask16)(cols >= 32 ? 0xffff : cols <= 16 ? 0 : (1u << (cols - 16)) - 1);
    for (int i = 0; i < M; i++) {
        float *y = j->y + (i0 + i) * j->ldy + j0;
        _mm512_mask_storeu_ps(y, m0, acc[i][0]);
        _mm512_mask_storeu_ps(y + 16, m1, acc[i][1]);
    }
}

static void panel_task(void *ctx, int task, int thread) {
    const qgemm_job *j = ctx;
    uint8_t *panel = j->buffers + (size_t)thread * j->panel_bytes;
    long j0 = (long)task * PANEL;
    int cols = (int)(j->out - j0 < PANEL ? j->out - j0 : PANEL);
    pack_panel(j, j0, panel);
    long i = 0;
    for (; i + TILE_M <= j->n; i += TILE_M) tile(j, panel, i, j0, cols, TILE_M);
    switch (j->n - i) {
    case 5: tile(j, panel, i, j0, cols, 5); break;
    case 4: tile(j, panel, i, j0, cols, 4); break;
    case 3: tile(j, panel, i, j0, cols, 3); break;
    case 2: tile(j, panel, i, j0, cols, 2); break;
    case 1: tile(j, panel, i, j0, cols, 1); break;
    default: break;
    }
}

void cf_matvec_q_gemm_avx512vnni(const void *w, bool q4, const void *xq, long x_stride, long n, long in, long out,
                                 float *y, long ldy) {
    qgemm_job j = {.w = matvec_q_planes(w, q4), .q4 = q4, .x = xq, .x_stride = x_stride, .n = n, .in = in,
                   .out = out, .y = y, .ldy = ldy};
    j.panel_bytes = ((size_t)j.w.blocks * (CF_Q8_0_BLOCK + sizeof(float)) * PANEL + 63) / 64 * 64;
    int threads = cf_in_parallel() ? 1 : cf_num_threads(), panels = (int)((out + PANEL - 1) / PANEL);
    j.buffers = cf_aligned_alloc(j.panel_bytes * (size_t)threads);
    if (threads == 1 || panels < 2)
        for (int p = 0; p < panels; p++) panel_task(&j, p, 0);
    else
        cf_parallel_for(panels, panel_task, &j);
    cf_aligned_free(j.buffers);
}
