/* Matrix-vector products for the decode step, which streams every weight once per token
 * and is bound by memory bandwidth: rows are split over the pool, four rows share each
 * load of x, and bf16 weights are widened to f32 in registers (x stays f32).
 *
 * bf16 rows are read a whole vector register at a time and split into the even and odd
 * elements by a shift and a mask (one cheap op each, no cross-lane shuffle); x is
 * rearranged once per product to match: per block of MATVEC_PAIR_BLOCK inputs, the
 * even-indexed values, then the odd-indexed ones, zero-padded to a whole block. */
#ifndef CFORMERS_INFER_MATVEC_H
#define CFORMERS_INFER_MATVEC_H

#include <stdbool.h>
#include <string.h>

#include "cformers/dtype.h"

/* One matrix [rows, in] (f32, bf16, or a matvec_q8 for q8_0) and where its product goes. */
typedef struct matvec_part {
    const void *w;
    float *y;
    long rows;
} matvec_part;

/* The pair block of each kernel (one vector register of bf16); the scratch for one input
 * of `in` holds matvec_pairs_floats(in) floats, enough for the widest pairs and for x
 * quantized for q8_0 weights (68 bytes per block), a multiple of 64 bytes. */
enum { MATVEC_PAIR_BLOCK_AVX2 = 16, MATVEC_PAIR_BLOCK_AVX512 = 32, MATVEC_PAIR_BLOCK_MAX = 32 };
static inline long matvec_pairs_floats(long in) { return (in + 63) / 64 * 64 * 2; }

/* y = w @ x for each part, all sharing x[in] and the dtype, in a single pool dispatch
 * (q/k/v and gate/up go together, halving the synchronisation per layer). `pairs` is
 * scratch of matvec_pairs_floats(in) floats, used for bf16 weights (x rearranged) and
 * q8_0 weights (x quantized, see cf_matvec_quantize_x). */
void cf_infer_matvec(const matvec_part *parts, int n_parts, cf_dtype dtype, const float *x, long in, float *pairs);

/* The same for n inputs x[n, in] at once (a batched decode step, the q8_0 prompt path):
 * part i's products for input t go to parts[i].y + t * parts[i].rows. Each weight chunk is
 * taken by every input while it is in cache, so the weights are read from memory once, and
 * each output equals cf_infer_matvec's for that input alone, bit for bit (the batch changes no
 * summation order). scratch holds n * matvec_pairs_floats(in) floats. */
void cf_infer_matvec_batch(const matvec_part *parts, int n_parts, cf_dtype dtype, const float *x, long n, long in,
                        float *scratch);

/* x[in] into `pairs` (see above): per block, x[0], x[2], ... then x[1], x[3], ..., zero-padded
 * to a whole block. */
void cf_matvec_arrange_pairs(const float *x, long in, long block, float *pairs);
/* Where input i sits in the arranged pairs. */
static inline long matvec_pair_index(long i, long block) {
    long k = i % block;
    return i - k + (k % 2 ? block / 2 : 0) + k / 2;
}

/* The kernels take rows in groups of MATVEC_ROWS, which share each load of x. Row k of the
 * group starting at r (a short last group repeats its final row), and where its software
 * prefetch reads: the same offset `dist` rows further on, a whole number of groups and at
 * least MATVEC_PREFETCH_BYTES ahead (short bf16 and q8_0 rows would otherwise prefetch only
 * a few KiB ahead), so the loads in flight reach further than the hardware prefetcher does
 * (the row itself near the end of the range). The prefetches go to L2 (_MM_HINT_T1): into
 * L1 they held its few miss buffers, and decode ran at 8-12 GB/s per CPU second on one
 * thread against 15-17 into L2 (f32 / bf16 / q8_0 on the 110M model, docs/inference.md).
 * A one-input product larger than L2 goes through the ISA table's streaming twin where it
 * has one (AVX2): the group's four rows spread a quarter of the range apart (matvec_groups
 * below), so they are four long sequential streams, and no software prefetch. Zen 3's
 * prefetchers follow those well and four adjacent rows (four interleaved streams) badly;
 * the prefetch instructions only cost load slots there. Decode of the 110M model on one
 * thread, medians of 5 interleaved runs: f32 24.3 -> 37.5 tok/s, bf16 51.2 -> 78.9, q8_0
 * 121.5 -> 138.7, against one row at a time with prefetch (the twin before; adjacent groups
 * were slower still). Each row's arithmetic is the grouped kernel's, so the results are
 * bit for bit the same. */
enum { MATVEC_ROWS = 4, MATVEC_PREFETCH_BYTES = 8192 };
static inline long matvec_ahead_rows(long row_bytes) {
    long groups = (MATVEC_PREFETCH_BYTES + MATVEC_ROWS * row_bytes - 1) / (MATVEC_ROWS * row_bytes);
    return MATVEC_ROWS * (groups > 1 ? groups : 1);
}
#define MATVEC_GROUP_ROWS(row, ahead, w, r, r1, in, dist) MATVEC_TILE_ROWS(row, ahead, w, r, r1, in, dist, MATVEC_ROWS)
/* The groups of R rows a kernel takes over [r0, r1). Contiguous (rows r, r + 1, ...) unless
 * spread: then the first (r1 - r0) / R groups take rows r0 + g + k * spread, so the group's R
 * rows are R sequential streams (r1 - r0) / R rows apart, and the rows left after them go in
 * contiguous groups (the streaming twins, above). */
typedef struct matvec_groups {
    long r1, spread, rest, count;
} matvec_groups;
static inline matvec_groups matvec_groups_of(long r0, long r1, int R, int spread) {
    long n = spread ? (r1 - r0) / R : 0, rest = r0 + n * R;
    return (matvec_groups){.r1 = r1, .spread = n, .rest = rest, .count = n + (r1 - rest + R - 1) / R};
}
/* Group g's rows into idx[R] (a short last group repeats r1 - 1); returns how many are real. */
static inline int matvec_group_rows(const matvec_groups *gs, long g, int R, long *idx) {
    bool spread = g < gs->spread;
    long first = spread ? gs->rest - gs->spread * R + g : gs->rest + (g - gs->spread) * R, step = spread ? gs->spread : 1;
    int n = 0;
    for (int k = 0; k < R; k++) {
        long i = first + k * step;
        idx[k] = i < gs->r1 ? (n++, i) : gs->r1 - 1;
    }
    return n;
}
/* Row i of w (rows `in` elements apart) into row[k], and into ahead[k] where its software
 * prefetch reads: `dist` rows on, or the row itself near the end of the range. */
#define MATVEC_ROW_AT(row, ahead, k, w, i, r1, in, dist)                                                               \
    do {                                                                                                               \
        long i_ = (i);                                                                                                 \
        row[k] = (w) + i_ * (in);                                                                                      \
        ahead[k] = i_ + (dist) < (r1) ? row[k] + (dist) * (in) : row[k];                                               \
    } while (0)
/* The rows idx[R] (matvec_group_rows). */
#define MATVEC_IDX_ROWS(row, ahead, w, idx, r1, in, dist, R)                                                           \
    for (int k_ = 0; k_ < (R); k_++) MATVEC_ROW_AT(row, ahead, k_, w, (idx)[k_], r1, in, dist);
/* The same as MATVEC_GROUP_ROWS for a group of R rows (the several-input kernels' tiles). */
#define MATVEC_TILE_ROWS(row, ahead, w, r, r1, in, dist, R)                                                            \
    for (int k_ = 0; k_ < (R); k_++) MATVEC_ROW_AT(row, ahead, k_, w, (r) + k_ < (r1) ? (r) + k_ : (r1) - 1, r1, in, dist);

/* A kernel's first `dist` rows, prefetched at once before its loop (to L2, line by line):
 * the in-loop prefetch reaches `dist` rows ahead only from the first group on, so without
 * this the start of each range would wait for memory a group at a time, which on 2 threads
 * (ranges of CHUNK_BYTES, matvec.c) is a sixth of the bytes. A microbenchmark of q8_0
 * products in 64 KiB ranges over the 110M model's matrices (one thread, per CPU second,
 * 6 alternating runs on the loaded 2-core machine): median 12.6 -> 13.6 GB/s. For kernel
 * files (immintrin.h); w typed, rows `in` elements apart, as MATVEC_GROUP_ROWS takes them. */
#define MATVEC_PREFETCH_START(w, r0, r1, in, dist)                                                                     \
    for (const char *p_ = (const char *)((w) + (r0) * (in)),                                                          \
                    *e_ = (const char *)((w) + ((r0) + (dist) < (r1) ? (r0) + (dist) : (r1)) * (in));                  \
         p_ < e_; p_ += 64)                                                                                            \
        _mm_prefetch(p_, _MM_HINT_T1);

/* The f16 scales of rows [r0, r1) of a matvec_q8 (below) into L2, line by line: the q8_0
 * kernels prefetch their quants `dist` rows ahead, and the scales, a second stream of 1/16
 * the bytes in their own plane, `dist` rows ahead too (before, left to the hardware
 * prefetcher: q8_0 products over the 110M model's matrices, one thread, per CPU second,
 * medians of alternating runs in four sessions, 16.5-19.3 -> 17.5-21.1 GB/s). */
#define MATVEC_Q8_PREFETCH_SCALES(m, r0, r1)                                                                           \
    for (const char *p_ = (const char *)((uintptr_t)((m)->d + (r0) * (m)->blocks) & ~(uintptr_t)63),                 \
                    *e_ = (const char *)((m)->d + (r1) * (m)->blocks);                                                 \
         p_ < e_; p_ += 64)                                                                                            \
        _mm_prefetch(p_, _MM_HINT_T1);

/* Rows [r0, r1) of y = w @ x (the ISA files are compiled for their instruction set). The
 * bf16 kernels take x already rearranged into even/odd blocks of 32 (AVX-512) or 16 (AVX2),
 * the q8_0 ones x quantized (below). */
typedef void (*matvec_rows_fn)(const void *w, const void *x, float *y, long r0, long r1, long in);
/* The portable rows (the scalar bf16 rows take x as it is, not rearranged). */
void cf_matvec_f32_rows_scalar(const void *w, const void *x, float *y, long r0, long r1, long in);
void cf_matvec_bf16_rows_scalar(const void *w, const void *x, float *y, long r0, long r1, long in);
void cf_matvec_f32_rows_avx512(const void *w, const void *x, float *y, long r0, long r1, long in);
void cf_matvec_bf16_rows_avx512(const void *w, const void *x_pairs, float *y, long r0, long r1, long in);
void cf_matvec_f32_rows_avx2(const void *w, const void *x, float *y, long r0, long r1, long in);
void cf_matvec_bf16_rows_avx2(const void *w, const void *x_pairs, float *y, long r0, long r1, long in);
void cf_matvec_f32_stream_avx2(const void *w, const void *x, float *y, long r0, long r1, long in);
void cf_matvec_bf16_stream_avx2(const void *w, const void *x_pairs, float *y, long r0, long r1, long in);

/* q8_0 weights (dtype.h) multiply x quantized per block of 32 the same way, its scale
 * kept in f32: per block b, d_w * d_x * sum(q_w * q_x), the sum exact in int32.
 *
 * The kernels read q8_0 matrices repacked at load from GGUF's interleaved 34-byte blocks
 * into the same bytes split in two planes, so a 64-byte load is two whole blocks and the
 * scales of 16 blocks are one load: per row, `blocks` (ceil(in / 32) rounded up to even,
 * the extra block zero) blocks of 32 quants stored as q + 128 (unsigned: VNNI's vpdpbusd
 * multiplies unsigned by signed bytes; x's share of the offset, 128 * sum(q_x), is taken
 * off once per block of x for every row), then the rows' f16 scales. infer_linear.w of a
 * q8_0 matrix points at one of these. */
typedef struct matvec_q8 {
    const uint8_t *q; /* [rows, blocks * 32], q + 128 */
    const cf_f16 *d;  /* [rows, blocks] */
    long blocks;
    /* no quant is -128 (set by cf_matvec_q8_pack; false, the default, where unknown): the
     * AVX2 kernel may then put |x| on maddubs's unsigned side (matvec_q8_avx2.c) */
    bool no_min;
} matvec_q8;
static inline long matvec_q8_blocks(long in) { return (in + 2 * CF_Q8_0_BLOCK - 1) / (2 * CF_Q8_0_BLOCK) * 2; }
/* Bytes of the two planes of a rows x in matrix (the header not included). */
static inline size_t matvec_q8_bytes(long rows, long in) {
    return (size_t)rows * (size_t)matvec_q8_blocks(in) * CF_Q8_0_BLOCK_BYTES;
}
/* GGUF q8_0 blocks (rows of ceil(in / 32)) into the planes at mem (64-byte aligned,
 * matvec_q8_bytes), described by *out. */
void cf_matvec_q8_pack(const void *blocks, long rows, long in, void *mem, matvec_q8 *out);
/* Row r back to floats, dst[in] (the embedding lookup). */
void cf_matvec_q8_row(const matvec_q8 *w, long r, long in, float *dst);

/* x quantized (one per input in the scratch; 64-byte aligned, matvec_pairs_floats(in)
 * floats): the quants [blocks * 32] int8, then per pair of blocks 16 int32 that are zero
 * but lanes 0 and 8, -128 * sum(q_x) of each block (the offset's share, the start of a
 * 512-bit vpdpbusd), then the f32 scales [blocks], then per block 8 int32 that are zero but
 * lane 0, -8 * sum(q_x) (q4_0's offset's share, matvec_x_q4_offsets); padding blocks are
 * zero. */
void cf_matvec_quantize_x(const float *x, long in, void *scratch);
/* The same, bit for bit, vectorized (matvec_q8_avx512.c, matvec_q8_avx2.c). */
void cf_matvec_quantize_x_avx512(const float *x, long in, void *scratch);
void cf_matvec_quantize_x_avx2(const float *x, long in, void *scratch);
static inline const int32_t *matvec_x_offsets(const void *scratch, long in) {
    return (const int32_t *)((const int8_t *)scratch + matvec_q8_blocks(in) * CF_Q8_0_BLOCK);
}
static inline const float *matvec_x_scales(const void *scratch, long in) {
    return (const float *)(matvec_x_offsets(scratch, in) + matvec_q8_blocks(in) * 8);
}
static inline const int32_t *matvec_x_q4_offsets(const void *scratch, long in) {
    return (const int32_t *)(matvec_x_scales(scratch, in) + matvec_q8_blocks(in));
}
/* Block b's scale and sum of quants into x's scratch (every quantizer's last step). */
static inline void matvec_x_block_done(int32_t *offsets, float *d, long blocks, long b, float scale, int32_t sum) {
    d[b] = scale;
    offsets[b * 8] = -128 * sum;                                  /* lane 0 or 8 of its pair's 16 */
    ((int32_t *)(d + blocks))[b * 8] = -8 * sum; /* matvec_x_q4_offsets */
}
/* The three parts of x's quantized scratch, the offsets zeroed (the quantizers' start);
 * returns the number of blocks. */
static inline long matvec_x_parts(void *scratch, long in, int8_t **q, int32_t **offsets, float **d) {
    long blocks = matvec_q8_blocks(in);
    *q = scratch;
    *offsets = (int32_t *)matvec_x_offsets(scratch, in);
    *d = (float *)matvec_x_scales(scratch, in);
    memset(*offsets, 0, sizeof(int32_t) * 8 * (size_t)blocks);
    memset(*d + blocks, 0, sizeof(int32_t) * 8 * (size_t)blocks); /* matvec_x_q4_offsets */
    return blocks;
}
void cf_matvec_q8_rows_scalar(const void *w, const void *xq, float *y, long r0, long r1, long in);

/* q4_0 weights multiply x quantized as for q8_0 (cf_matvec_quantize_x): per block b,
 * d_w * d_x * sum((q_w - 8) * q_x), the sum exact in int32. Repacked at load like q8_0: per
 * row `blocks` (matvec_q8_blocks: even) blocks of nibbles, 16 bytes each, in pairs: byte j
 * (< 32) of a pair holds element j of its first block in the low nibble and element j of
 * its second in the high one (GGUF pairs elements j and j + 16 of one block instead), so
 * one 32-byte load, a mask and a shift give two blocks' values in order; then the rows'
 * f16 scales. Padding blocks are nibbles 8 (value 0) with scale 0. */
typedef struct matvec_q4 {
    const uint8_t *q; /* [rows, blocks * 16] */
    const cf_f16 *d;  /* [rows, blocks] */
    long blocks;
} matvec_q4;
enum { MATVEC_Q4_BLOCK_BYTES = CF_Q8_0_BLOCK / 2 };
static inline size_t matvec_q4_bytes(long rows, long in) {
    return (size_t)rows * (size_t)matvec_q8_blocks(in) * CF_Q4_0_BLOCK_BYTES;
}
/* The planes of a matvec_q8 or (q4) matvec_q4 as a matvec_q8 (the same three fields): the
 * kernels that take both. */
static inline matvec_q8 matvec_q_planes(const void *w, bool q4) {
    if (!q4) return *(const matvec_q8 *)w;
    const matvec_q4 *m4 = w;
    return (matvec_q8){.q = m4->q, .d = m4->d, .blocks = m4->blocks};
}
void cf_matvec_q4_pack(const void *blocks, long rows, long in, void *mem, matvec_q4 *out);
void cf_matvec_q4_row(const matvec_q4 *w, long r, long in, float *dst);
void cf_matvec_q4_rows_scalar(const void *w, const void *xq, float *y, long r0, long r1, long in);
/* AVX2 (matvec_q8_avx2.c, one tile with q8_0's), also on AVX-512 CPUs without VNNI: grouped
 * rows and the streaming twin (several inputs: cf_matvec_q4_rowsn_avx2 below); with VNNI
 * (matvec_q8_avx512vnni.c, one tile with q8_0's). */
void cf_matvec_q4_rows_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in);
void cf_matvec_q4_stream_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in);
void cf_matvec_q8_rows_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in);
void cf_matvec_q8_stream_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in);
void cf_matvec_q8_rows_avx512vnni(const void *w, const void *xq, float *y, long r0, long r1, long in);
void cf_matvec_q4_rows_avx512vnni(const void *w, const void *xq, float *y, long r0, long r1, long in);

/* y [n, ldy] = the n quantized inputs xq (cf_matvec_quantize_x, x_stride bytes apart) times
 * the q8_0 or (q4) q4_0 planes w [out, in] transposed, each element as the portable rows
 * kernel sums it (per block d_w * d_x * the exact int dot, in block order): an int8 GEMM for
 * prompt chunks (qgemm_avx512vnni.c, the kernel context's matvec_q_gemm). */
typedef void (*cf_matvec_q_gemm_fn)(const void *w, bool q4, const void *xq, long x_stride, long n, long in, long out,
                                    float *y, long ldy);
void cf_matvec_q_gemm_avx512vnni(const void *w, bool q4, const void *xq, long x_stride, long n, long in, long out,
                                 float *y, long ldy);

/* Several inputs at once (a batched step, matvec_batch_avx512.c): n inputs x_t at
 * x + t * x_stride bytes (prepared as the one-input kernel takes them), outputs at
 * y + t * y_stride floats, each bit-identical to the one-input kernel's for x_t alone. Per
 * weight dtype a table indexed by n: entries 2 up to the widest kernel set, the others NULL
 * (bf16 and q8_0 stop at 4, f32 at MATVEC_BATCH_MAX). */
enum { MATVEC_BATCH_MAX = 8 };
typedef void (*matvec_rowsn_fn)(const void *w, const void *x, long x_stride, float *y, long y_stride, long r0, long r1,
                                long in);
extern const matvec_rowsn_fn cf_matvec_f32_rowsn_avx512[MATVEC_BATCH_MAX + 1];
extern const matvec_rowsn_fn cf_matvec_bf16_rowsn_avx512[MATVEC_BATCH_MAX + 1];
/* AVX2 (matvec_batch_avx2.c): f32 up to 4 inputs, bf16 2. */
extern const matvec_rowsn_fn cf_matvec_f32_rowsn_avx2[MATVEC_BATCH_MAX + 1];
extern const matvec_rowsn_fn cf_matvec_bf16_rowsn_avx2[MATVEC_BATCH_MAX + 1];
/* q8_0 and q4_0 with VNNI (matvec_q8_avx512vnni.c), up to 4 inputs: x quantized per input. */
extern const matvec_rowsn_fn cf_matvec_q8_rowsn_avx512vnni[MATVEC_BATCH_MAX + 1];
extern const matvec_rowsn_fn cf_matvec_q4_rowsn_avx512vnni[MATVEC_BATCH_MAX + 1];
/* q8_0 without VNNI (matvec_q8_avx2.c: AVX2, and AVX-512 CPUs without VNNI), up to 4 inputs,
 * one row at a time. */
extern const matvec_rowsn_fn cf_matvec_q8_rowsn_avx2[MATVEC_BATCH_MAX + 1];
/* q4_0 likewise (matvec_q8_avx2.c), up to 4 inputs. */
extern const matvec_rowsn_fn cf_matvec_q4_rowsn_avx2[MATVEC_BATCH_MAX + 1];
/* Defines `table`, entries 2 to 4 the inline tile(w, x, x_stride, y, y_stride, r0, r1, in, N)
 * with N fixed (the q8_0 kernels' tables). */
#define MATVEC_ROWSN_TABLE_2_TO_4(table, tile)                                                                          \
    static void tile##_2(const void *w, const void *x, long xs, float *y, long ys, long r0, long r1, long in) {         \
        tile(w, x, xs, y, ys, r0, r1, in, 2);                                                                          \
    }                                                                                                                  \
    static void tile##_3(const void *w, const void *x, long xs, float *y, long ys, long r0, long r1, long in) {         \
        tile(w, x, xs, y, ys, r0, r1, in, 3);                                                                          \
    }                                                                                                                  \
    static void tile##_4(const void *w, const void *x, long xs, float *y, long ys, long r0, long r1, long in) {         \
        tile(w, x, xs, y, ys, r0, r1, in, 4);                                                                          \
    }                                                                                                                  \
    const matvec_rowsn_fn table[MATVEC_BATCH_MAX + 1] = {NULL, NULL, tile##_2, tile##_3, tile##_4};

#endif
