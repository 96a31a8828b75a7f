/* Packing of A and B blocks into the micro-panel layouts the kernels stream.
 *
 * A block (rows = an M range, cols = a K range), panel width mr:
 *   f32:   dst[p*mr*K + k*mr + i]          = A(p*mr + i, k)
 *   pairs: dst[(p*mr*Kp + q*mr + i)*2 + h] = A(p*mr + i, 2q + h)      Kp = ceil(K / 2)
 * B block (rows = a K range, cols = an N range), panel width nr:
 *   f32:   dst[p*nr*K + k*nr + j]          = B(k, p*nr + j)
 *   pairs: dst[(p*nr*Kp + q*nr + j)*2 + h] = B(2q + h, p*nr + j)
 *
 * Both are the same operation on "strips": `h` lines of length K, line i's element k
 * at src[i*s_line + k*s_k], written k-major with `w` slots per k step. Columns of a B
 * panel past N are zero, since kernels load whole vectors; rows of an f32 A panel past
 * M may be left unwritten, since f32 kernels read only the rows they have. Pairs past
 * K (an odd K's last half, the padding to k_group) are zero. */
#include "gemm_internal.h"

#include "cformers/dtype.h"

#include <stdint.h>
#include <string.h>

typedef struct strip {
    const gemm_operand *src;
    long base;          /* element offset of (line 0, k 0) */
    long s_line, s_k;   /* strides in elements */
    int h, w;           /* lines present, slots per k step */
    long K;
} strip;

static inline float strip_get(const strip *s, int i, long k) {
    long off = s->base + i * s->s_line + k * s->s_k;
    if (s->src->bf16) return cf_bf16_to_f32(((const cf_bf16 *)s->src->data)[off]);
    return ((const float *)s->src->data)[off];
}

static void strip_f32_from_f32(const strip *s, float *dst) {
    const float *src = (const float *)s->src->data + s->base;
    int h = s->h, w = s->w;
    if (s->s_k == 1) { /* lines contiguous along k: read each line, scatter by w */
        for (int i = 0; i < h; i++) {
            const float *line = src + i * s->s_line;
            for (long k = 0; k < s->K; k++) dst[k * w + i] = line[k];
        }
    } else {
        for (long k = 0; k < s->K; k++) {
            const float *col = src + k * s->s_k;
            float *d = dst + k * w;
            if (s->s_line == 1) memcpy(d, col, sizeof(float) * (size_t)h);
            else
                for (int i = 0; i < h; i++) d[i] = col[i * s->s_line];
        }
    }
}

/* Vector moves into f32 panels, for the two layouts they take: strips whose lines run along
 * k, and whole blocks whose lines are adjacent (k-major); from f32 and from bf16 (widened).
 * NULL for the portable path. */
typedef struct fast_f32 {
    void (*strip)(const float *src, long s_line, int h, long K, int w, float *dst);
    void (*block)(const float *src, long s_k, long lines, long K, int w, float *dst);
    void (*strip_bf16)(const uint16_t *src, long s_line, int h, long K, int w, float *dst);
    void (*block_bf16)(const uint16_t *src, long s_k, long lines, long K, int w, float *dst);
    gemm_decode_strip_fn decode_strip; /* q8_0 / q4_0 weights decoded as they are packed */
} fast_f32;

static void strip_f32(const strip *s, float *dst, bool pad, const fast_f32 *fast) {
    if (fast && s->s_k == 1) { /* k-major sources go through the block routine */
        if (s->src->bf16) fast->strip_bf16((const uint16_t *)s->src->data + s->base, s->s_line, s->h, s->K, s->w, dst);
        else fast->strip((const float *)s->src->data + s->base, s->s_line, s->h, s->K, s->w, dst);
        return;
    }
    if (s->src->bf16) {
        for (long k = 0; k < s->K; k++)
            for (int i = 0; i < s->h; i++) dst[k * s->w + i] = strip_get(s, i, k);
    } else {
        strip_f32_from_f32(s, dst);
    }
    if (pad && s->h < s->w)
        for (long k = 0; k < s->K; k++) memset(dst + k * s->w + s->h, 0, sizeof(float) * (size_t)(s->w - s->h));
}

static inline uint16_t strip_get_bf16(const strip *s, int i, long k) {
    if (k >= s->K) return 0;
    long off = s->base + i * s->s_line + k * s->s_k;
    if (s->src->bf16) return ((const cf_bf16 *)s->src->data)[off];
    return cf_f32_to_bf16(((const float *)s->src->data)[off]);
}

/* Writes `pairs` k pairs (at least ceil(K / 2); the ones past K are zero). Pair kernels
 * run only on AVX-512 BF16 machines, so bf16 sources take the AVX-512 path there. */
static void strip_pairs(const strip *s, uint16_t *dst, long pairs) {
    if (s->src->bf16 && cf_gemm_strip_pairs_avx512((const uint16_t *)s->src->data + s->base, s->s_line, s->s_k, s->h,
                                                   s->K, pairs, s->w, dst))
        return;
    for (long q = 0; q < pairs; q++) {
        uint16_t *d = dst + 2 * q * s->w;
        for (int i = 0; i < s->h; i++) {
            d[2 * i] = strip_get_bf16(s, i, 2 * q);
            d[2 * i + 1] = strip_get_bf16(s, i, 2 * q + 1);
        }
        memset(d + 2 * s->h, 0, sizeof(uint16_t) * 2 * (size_t)(s->w - s->h));
    }
}

/* The A block is sliced along its rows, the B block along its columns. */
static strip a_strip(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, long p) {
    long first = p * mr;
    return (strip){.src = src,
                   .base = (r0 + first) * src->row_stride + c0 * src->col_stride,
                   .s_line = src->row_stride,
                   .s_k = src->col_stride,
                   .h = (int)(rows - first < mr ? rows - first : mr),
                   .w = mr,
                   .K = cols};
}

static strip b_strip(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, long p) {
    long first = p * nr;
    return (strip){.src = src,
                   .base = r0 * src->row_stride + (c0 + first) * src->col_stride,
                   .s_line = src->col_stride,
                   .s_k = src->row_stride,
                   .h = (int)(cols - first < nr ? cols - first : nr),
                   .w = nr,
                   .K = rows};
}

/* The whole block in one go where the fast path takes it (lines adjacent, s_line == 1),
 * else false: the caller goes strip by strip. */
static bool block_f32(const gemm_operand *src, long r0, long c0, long s_line, long s_k, long lines, long K, int w,
                      float *dst, const fast_f32 *fast) {
    if (!fast || s_line != 1) return false;
    long at = r0 * src->row_stride + c0 * src->col_stride;
    if (src->bf16) fast->block_bf16((const uint16_t *)src->data + at, s_k, lines, K, w, dst);
    else fast->block((const float *)src->data + at, s_k, lines, K, w, dst);
    return true;
}

static void pack_a_f32(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, float *dst,
                       const fast_f32 *fast) {
    if (block_f32(src, r0, c0, src->row_stride, src->col_stride, rows, cols, mr, dst, fast)) return;
    for (long p = 0; p * mr < rows; p++) {
        strip s = a_strip(src, r0, c0, rows, cols, mr, p);
        strip_f32(&s, dst + p * mr * cols, false, fast);
    }
}

static void pack_b_f32(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, float *dst,
                       const fast_f32 *fast) {
    if (src->decode != CF_F32) {
        cf_gemm_pack_b_decode(src, r0, c0, rows, cols, nr, dst, fast ? fast->decode_strip : NULL);
        return;
    }
    if (block_f32(src, r0, c0, src->col_stride, src->row_stride, cols, rows, nr, dst, fast)) return;
    for (long p = 0; p * nr < cols; p++) {
        strip s = b_strip(src, r0, c0, rows, cols, nr, p);
        strip_f32(&s, dst + p * nr * rows, true, fast);
    }
}

static const fast_f32 fast_avx512 = {cf_gemm_strip_f32_avx512, cf_gemm_block_kmajor_f32_avx512,
                                     cf_gemm_strip_bf16_avx512, cf_gemm_block_kmajor_bf16_avx512,
                                     cf_gemm_decode_strip_avx512};
static const fast_f32 fast_avx2 = {cf_gemm_strip_f32_avx2, cf_gemm_block_kmajor_f32_avx2, cf_gemm_strip_bf16_avx2,
                                   cf_gemm_block_kmajor_bf16_avx2, cf_gemm_decode_strip_avx2};

void cf_gemm_pack_a_f32(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst) {
    pack_a_f32(src, r0, c0, rows, cols, mr, dst, NULL);
}

void cf_gemm_pack_b_f32(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst) {
    pack_b_f32(src, r0, c0, rows, cols, nr, dst, NULL);
}

void cf_gemm_pack_a_f32_avx512(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst) {
    pack_a_f32(src, r0, c0, rows, cols, mr, dst, &fast_avx512);
}

void cf_gemm_pack_b_f32_avx512(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst) {
    pack_b_f32(src, r0, c0, rows, cols, nr, dst, &fast_avx512);
}

void cf_gemm_pack_a_f32_avx2(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst) {
    pack_a_f32(src, r0, c0, rows, cols, mr, dst, &fast_avx2);
}

void cf_gemm_pack_b_f32_avx2(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst) {
    pack_b_f32(src, r0, c0, rows, cols, nr, dst, &fast_avx2);
}

static long ceil_to(long x, long multiple) { return (x + multiple - 1) / multiple * multiple; }

/* k is padded to a multiple of `k_group` (2 for vdpbf16ps, 32 for an AMX tile). */
static void pack_a_pairs(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, uint16_t *dst,
                         long k_group) {
    long pairs = ceil_to(cols, k_group) / 2;
    for (long p = 0; p * mr < rows; p++) {
        strip s = a_strip(src, r0, c0, rows, cols, mr, p);
        strip_pairs(&s, dst + 2 * p * mr * pairs, pairs);
    }
}

static void pack_b_pairs(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, uint16_t *dst,
                         long k_group) {
    long pairs = ceil_to(rows, k_group) / 2;
    for (long p = 0; p * nr < cols; p++) {
        strip s = b_strip(src, r0, c0, rows, cols, nr, p);
        strip_pairs(&s, dst + 2 * p * nr * pairs, pairs);
    }
}

void cf_gemm_pack_a_bf16_pairs(const gemm_operand *src, long r0, long c0, long rows, long cols, int mr, void *dst) {
    pack_a_pairs(src, r0, c0, rows, cols, mr, dst, 2);
}

void cf_gemm_pack_b_bf16_pairs(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst) {
    pack_b_pairs(src, r0, c0, rows, cols, nr, dst, 2);
}

void cf_gemm_pack_b_bf16_pairs32(const gemm_operand *src, long r0, long c0, long rows, long cols, int nr, void *dst) {
    pack_b_pairs(src, r0, c0, rows, cols, nr, dst, 32);
}
