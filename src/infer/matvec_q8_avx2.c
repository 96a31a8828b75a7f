/* q8_0 and q4_0 decode kernels for AVX2 (matvec.h's repacked layouts). Without VNNI the
 * sign trick does q8_0's int8 products: |w| (unsigned) times x with w's sign, so maddubs
 * (unsigned by signed, summed in pairs into int16: at most 2 * 128 * 127, no saturation)
 * and madd by ones give each block's sums in 8 int32 lanes; x is never -128 (cf_matvec_quantize_x rounds
 * within +-127). Where the matrix has no -128 (matvec_q8.no_min) the roles swap, |x| times
 * w with x's sign, and |x| serves every row of the group (load_pair below). Rows come in groups of MATVEC_ROWS sharing each load of x, adjacent or
 * spread over the range (the streaming twin, matvec.h). */
#include <float.h>
#include <immintrin.h>
#include <string.h>

#include "infer/matvec.h"
#include "infer/matvec_hsum.h"

/* cf_matvec_quantize_x for AVX2, bit for bit the portable one (as matvec_q8_avx512.c says:
 * the same f32 operations, round to nearest even, NaN skipped by the max and clamped to
 * 127); a short last block goes through a zeroed copy. */
void cf_matvec_quantize_x_avx2(const float *x, long in, void *scratch) {
    int8_t *q;
    int32_t *offsets;
    float *d;
    long blocks = matvec_x_parts(scratch, in, &q, &offsets, &d);
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (long b = 0; b < blocks; b++) {
        long left = in - b * CF_Q8_0_BLOCK;
        int n = left < 0 ? 0 : left < CF_Q8_0_BLOCK ? (int)left : CF_Q8_0_BLOCK;
        float tail[CF_Q8_0_BLOCK] = {0};
        const float *xb = x + b * CF_Q8_0_BLOCK;
        if (n < CF_Q8_0_BLOCK) memcpy(tail, xb, sizeof(float) * (size_t)n), xb = tail;
        __m256 v[4], amax_v = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            amax_v = _mm256_max_ps(_mm256_and_ps(v[k], abs_mask), amax_v); /* NaN lanes drop out */
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax_v), _mm256_extractf128_ps(amax_v, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        /* a scale under FLT_MIN (a block of denormals) has no finite inverse: the block is 0 */
        float scale = amax / 127.0f >= FLT_MIN ? amax / 127.0f : 0.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        __m256 s = _mm256_set1_ps(inv);
        __m256i qi[4], sum = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            /* min(v, 127) is 127 for NaN v; lanes past the input are 0 (0 * inf would not be) */
            qi[k] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(_mm256_mul_ps(v[k], s), hi), lo));
            int past = n - 8 * k; /* lanes [past, 8) are padding */
            if (past < 8) {
                __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                qi[k] = _mm256_and_si256(qi[k], _mm256_cmpgt_epi32(_mm256_set1_epi32(past), lane));
            }
            sum = _mm256_add_epi32(sum, qi[k]);
        }
        __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(qi[0], qi[1]), _mm256_packs_epi32(qi[2], qi[3]));
        _mm256_storeu_si256((__m256i *)(q + b * CF_Q8_0_BLOCK), _mm256_permutevar8x32_epi32(packed, order));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        matvec_x_block_done(offsets, d, blocks, b, scale, _mm_cvtsi128_si32(s4));
    }
}

/* One pair of blocks of a row, ready for the products with x: q8_0 as |w| (unsigned) and w
 * itself for the sign of x (the sign trick), or (XU: the matrix has no -128, matvec_q8's
 * no_min) w alone, multiplied as sign(w, x) by |x| on maddubs's unsigned side: |x| is the
 * same for every row of the group, so each block of each row costs one vpsignb fewer
 * (|w| = 128 has no signed form, hence the flag); q4_0 as its nibbles unsigned, 0..15
 * (maddubs's pairs then reach 2 * 15 * 127: no saturation), the -8 added per block from x's
 * -8 * sum(q_x) (matvec_x_q4_offsets). Both tricks give the exact int32 sums. */
typedef struct q_pair {
    __m256i a[2], v[2];
} q_pair;

static inline __attribute__((always_inline)) q_pair load_pair(const uint8_t *p, const int Q4, const int XU) {
    q_pair w;
    if (Q4) { /* 32 bytes: the low nibbles the first block's elements, the high ones the second's */
        const __m256i low = _mm256_set1_epi8(0x0f);
        __m256i raw = _mm256_loadu_si256((const __m256i *)p);
        w.a[0] = _mm256_and_si256(raw, low), w.a[1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
    } else {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        for (int h = 0; h < 2; h++) {
            w.v[h] = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(p + h * CF_Q8_0_BLOCK)), flip);
            if (!XU) w.a[h] = _mm256_sign_epi8(w.v[h], w.v[h]);
        }
    }
    return w;
}

/* Block h of the pair times x's block (quants xq) in 8 int32 lanes whose sum is the block's
 * exact dot product; q4_0: sum(q * x) of the nibbles plus x's -8 * sum(x) (off4: lane 0 of
 * matvec_x_q4_offsets' 8). */
static inline __attribute__((always_inline)) __m256i pair_dot(const q_pair *w, int h, const int8_t *xq,
                                                              const int32_t *off4, const int Q4, const int XU) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i x = _mm256_loadu_si256((const __m256i *)xq);
    if (Q4)
        return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(w->a[h], x), ones),
                                _mm256_loadu_si256((const __m256i *)off4));
    if (XU) /* |x| <= 127 (never -128) times w * sign(x), w > -128: pairs within 2 * 127 * 127 */
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(w->v[h], x)), ones);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(w->a[h], _mm256_sign_epi8(x, w->v[h])), ones);
}

/* A tile of R rows by N inputs (R > 1 with N = 1: rows in groups sharing each load of x,
 * spread over the range without software prefetch for STREAM (matvec.h); R = 1: one row at
 * a time, one stream, each weight load and expansion serving N inputs), of q8_0 or (Q4)
 * q4_0 weights. Per output the same arithmetic whatever the tile, so every tile
 * gives bit for bit the one-input kernel's sums: per row, 8 blocks' combined scales d_w * d_x
 * come from one 8-wide f16 conversion and are broadcast lane by lane (vpermps) instead of a
 * scalar conversion, product and broadcast per block (which the last nb % 8 blocks keep: the
 * same f32 product); the blocks go in pairs (nb is even), so one prefetch covers a 64-byte
 * line of each q8_0 row. q8_0 in cache 16 -> 20 GB/s per CPU second on Zen 3. */
enum { Q8_INPUTS = 4 };
static inline __attribute__((always_inline)) void q8_tile(const void *w, const void *xv, long x_stride, float *y,
                                                          long ys, long r0, long r1, long in, const int R, const int N,
                                                          const int Q4, const int STREAM, const int XU) {
    const bool PREFETCH = !STREAM;
    enum { SPAN = 8 };
    matvec_q8 m = matvec_q_planes(w, Q4);
    const long block_bytes = Q4 ? MATVEC_Q4_BLOCK_BYTES : CF_Q8_0_BLOCK;
    long nb = m.blocks, row_bytes = nb * block_bytes;
    long dist = matvec_ahead_rows(nb * (Q4 ? CF_Q4_0_BLOCK_BYTES : CF_Q8_0_BLOCK_BYTES));
    long spans_end = nb / SPAN * SPAN;
    const int8_t *q[Q8_INPUTS];
    const float *dx[Q8_INPUTS];
    const int32_t *off4[Q8_INPUTS]; /* q4_0's -8 * sum(q_x) */
    for (int t = 0; t < N; t++) {
        q[t] = (const int8_t *)((const char *)xv + t * x_stride);
        dx[t] = matvec_x_scales(q[t], in), off4[t] = matvec_x_q4_offsets(q[t], in);
    }
    if (PREFETCH) {
        MATVEC_PREFETCH_START(m.q, r0, r1, row_bytes, dist)
        MATVEC_Q8_PREFETCH_SCALES(&m, r0, r0 + dist < r1 ? r0 + dist : r1)
    }
    matvec_groups gs = matvec_groups_of(r0, r1, R, STREAM);
    for (long g = 0; g < gs.count; g++) {
        long idx[MATVEC_ROWS];
        int real = matvec_group_rows(&gs, g, R, idx);
        long r = idx[0];
        const uint8_t *row[MATVEC_ROWS], *ahead[MATVEC_ROWS];
        MATVEC_IDX_ROWS(row, ahead, m.q, idx, r1, row_bytes, dist, R)
        if (PREFETCH && r + dist < r1) MATVEC_Q8_PREFETCH_SCALES(&m, r + dist, r + dist + R < r1 ? r + dist + R : r1)
        const cf_f16 *d[MATVEC_ROWS];
        __m256 acc[MATVEC_ROWS][Q8_INPUTS];
        for (int k = 0; k < R; k++) {
            d[k] = m.d + (row[k] - m.q) / block_bytes;
            for (int t = 0; t < N; t++) acc[k][t] = _mm256_setzero_ps();
        }
        float sc_buf[MATVEC_ROWS * Q8_INPUTS * SPAN];
        for (long b0 = 0; b0 < spans_end; b0 += SPAN) {
            /* the combined scales of the span's blocks, sc[(k * N + t) * SPAN + block], each
             * broadcast from memory (a load, no shuffle); the base is made opaque per span, or
             * gcc hoists the 8 * R * N addresses out of the loop and spills them */
            float *sc = sc_buf;
            __asm__("" : "+r"(sc));
            for (int k = 0; k < R; k++) {
                __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(d[k] + b0)));
                for (int t = 0; t < N; t++)
                    _mm256_storeu_ps(sc + (k * N + t) * SPAN, _mm256_mul_ps(dw, _mm256_loadu_ps(dx[t] + b0)));
            }
#pragma GCC unroll 4
            for (int j = 0; j < SPAN; j += 2) { /* unrolled: the lane indices below are constants */
                long b = b0 + j;
                for (int k = 0; k < R; k++) {
                    if (PREFETCH && (!Q4 || j % 4 == 0)) _mm_prefetch((const char *)(ahead[k] + b * block_bytes), _MM_HINT_T1);
                    q_pair p = load_pair(row[k] + b * block_bytes, Q4, XU);
                    for (int h = 0; h < 2; h++)
                        for (int t = 0; t < N; t++) {
                            __m256i dot = pair_dot(&p, h, q[t] + (b + h) * CF_Q8_0_BLOCK, off4[t] + (b + h) * 8, Q4, XU);
                            acc[k][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_broadcast_ss(sc + (k * N + t) * SPAN + j + h),
                                                        acc[k][t]);
                        }
                }
            }
        }
        for (long b = spans_end; b < nb; b += 2)
            for (int k = 0; k < R; k++) {
                if (PREFETCH) _mm_prefetch((const char *)(ahead[k] + b * block_bytes), _MM_HINT_T1);
                q_pair p = load_pair(row[k] + b * block_bytes, Q4, XU);
                for (int h = 0; h < 2; h++) {
                    float dwc = _cvtsh_ss(d[k][b + h]);
                    for (int t = 0; t < N; t++) {
                        __m256i dot = pair_dot(&p, h, q[t] + (b + h) * CF_Q8_0_BLOCK, off4[t] + (b + h) * 8, Q4, XU);
                        acc[k][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dwc * dx[t][b + h]), acc[k][t]);
                    }
                }
            }
        for (int k = 0; k < real; k++)
            for (int t = 0; t < N; t++) y[t * ys + idx[k]] = matvec_hsum256(acc[k][t]);
    }
}

/* q8_0's tiles with |x| on the unsigned side where the matrix allows (XU above). */
#define Q8_TILE(w, ...)                                                                                                \
    (((const matvec_q8 *)(w))->no_min ? q8_tile(w, __VA_ARGS__, 1) : q8_tile(w, __VA_ARGS__, 0))
void cf_matvec_q8_rows_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    Q8_TILE(w, xq, 0, y, 0, r0, r1, in, MATVEC_ROWS, 1, 0, 0);
}
void cf_matvec_q8_stream_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    Q8_TILE(w, xq, 0, y, 0, r0, r1, in, MATVEC_ROWS, 1, 0, 1);
}
void cf_matvec_q4_rows_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    q8_tile(w, xq, 0, y, 0, r0, r1, in, MATVEC_ROWS, 1, 1, 0, 0);
}
void cf_matvec_q4_stream_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    q8_tile(w, xq, 0, y, 0, r0, r1, in, MATVEC_ROWS, 1, 1, 1, 0);
}

/* Several inputs at once (matvec.h's matvec_rowsn_fn): one row by N inputs. */
static inline __attribute__((always_inline)) void q8_rows_n(const void *w, const void *x, long xs, float *y, long ys,
                                                            long r0, long r1, long in, const int N) {
    Q8_TILE(w, x, xs, y, ys, r0, r1, in, 1, N, 0, 0);
}
MATVEC_ROWSN_TABLE_2_TO_4(cf_matvec_q8_rowsn_avx2, q8_rows_n)
static inline __attribute__((always_inline)) void q4_rows_n(const void *w, const void *x, long xs, float *y, long ys,
                                                            long r0, long r1, long in, const int N) {
    q8_tile(w, x, xs, y, ys, r0, r1, in, 1, N, 1, 0, 0);
}
MATVEC_ROWSN_TABLE_2_TO_4(cf_matvec_q4_rowsn_avx2, q4_rows_n)
