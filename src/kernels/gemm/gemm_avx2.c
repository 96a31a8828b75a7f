/* AVX2 + FMA f32 kernels: a 6 x 16 micro-tile (12 ymm accumulators, two B loads and
 * six broadcasts per k step; BLIS's haswell and zen3 sgemm tile), the same tile on A's
 * rows in place (C stored as it is, or transposed for the transposed product of gemm.c),
 * and the unpacked decode paths. Compiled with -mavx2
 * -mfma; reached only through the AVX2 and AVX-512 kernel contexts (kernels/context). */
#include "gemm_avx2_inline.h"
#include "gemm_internal.h"
#include "gemm_skinny_rows.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

enum { MR = 6, NR = 16, SKINNY_NT_ROWS = 4, SKINNY_NT_COLS = 3, SHORT_ROWS = 384, PREFETCH_STEPS = 8 };

/* KC_MAX, the longest K block (gemm_blocking.c): from a 48 KiB L1 (Zen 5) the 6-row A
 * panels alone would take KC = 1024, leaving NC 128 columns of L2, too few for A to be
 * read in place (gemm_blocked.c's A_IN_PLACE) on any product but the narrowest. BLIS's
 * haswell and zen3 configurations block K by 256. CFORMERS_ISA=avx2 on the Zen 5 VM, 1
 * thread, timed by CPU time (the machine was shared), 7 interleaved rounds, against KC =
 * 1024 / NC = 128: KC 384 / NC 336 with A in place 512 x 288 x 32000 +12%, 2048 x 288 x 768
 * +12%, 256^3 +4%, 512 x 2048 x 8192 +3%, 512 x 2048 x 2048 NT -1%, 512^3 -2%, decode 16 x
 * 8192 x 2048 even; KC 256 / NC 512 as much on the narrow products, -3% on the NT ones. */
enum { KC_MAX = 384 };

/* Writes alpha * acc (+ beta * C) to the m x n corner of a tile `halves` (1 or 2, a
 * constant after inlining) vectors of 8 columns wide. */
INLINE void store_rows(const int m, const int halves, __m256 acc[][2], float *c, long ldc, int n, float alpha,
                       float beta) {
    __m256i k[2] = {lanes8(n), lanes8(n - 8)};
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
    for (int i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int h = 0; h < halves; h++) {
            __m256 r = _mm256_mul_ps(va, acc[i][h]);
            if (beta != 0.0f) r = _mm256_fmadd_ps(vb, _mm256_maskload_ps(ci + 8 * h, k[h]), r);
            if (n >= NR) _mm256_storeu_ps(ci + 8 * h, r);
            else _mm256_maskstore_ps(ci + 8 * h, k[h], r);
        }
    }
}

/* As store_rows, into a C stored transposed (tile element (i, j) at c[i + j*ldc]): each
 * vector of 8 columns goes through a register transpose into 8 rows of C of m values. */
INLINE void store_cols(const int m, const int halves, __m256 acc[][2], float *c, long ldc, int n, float alpha,
                       float beta) {
    const __m256i k = lanes8(m);
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    for (int h = 0; h < halves; h++) {
        __m256 t[8];
        for (int i = 0; i < 8; i++) t[i] = i < m ? acc[i][h] : _mm256_setzero_ps();
        transpose8(t);
        for (int j = 0; j < 8 && 8 * h + j < n; j++) {
            float *cj = c + (8 * h + j) * ldc;
            __m256 r = _mm256_mul_ps(va, t[j]);
            if (beta != 0.0f) r = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cj, k), r);
            _mm256_maskstore_ps(cj, k, r);
        }
    }
}

/* How a tile reads B and writes C (constants after inlining). */
enum {
    B_ROWS = 1,  /* B's own rows (b_ks = ldb); else a zero-padded packed panel (b_ks = NR) */
    B_EDGE = 2,  /* with B_ROWS: the last columns, loaded under masks past column n */
    C_TRANS = 4, /* C stored transposed, C(i, j) at c[i + j*ldc] (A's rows in place, a_ks = 1) */
};

/* m rows by 8 * halves columns (constants after inlining; one half where the last panel
 * of B has at most 8 columns, as in gemm_avx512.c). A(i, k) = a[i*a_rs + k*a_ks]: a packed
 * panel (a_rs = 1, a_ks = MR), or for the small path and C_TRANS A's rows or columns in
 * place; B(k, j) = b[k*b_ks + j]. vmaskmovps costs a second uop, so only an edge tile of
 * B's own rows loads under masks. As in gemm_avx512.c, C's lines are fetched into L2 as
 * the tile starts, the packed panels PREFETCH_STEPS k steps ahead into L1 (against none,
 * 1 thread, CPU time, two sets of 7 rounds: +1..+2% on 8192 x 2048 x 512 TN, 512 x 2048 x
 * 8192, 32000 x 288 x 512 TN and 256^3), and with C_TRANS on rows shorter than SHORT_ROWS,
 * too short a run for the hardware prefetcher, the next tile's rows as it goes. */
INLINE void tile_body(const int m, const int halves, const int form, long k, const float *a, long a_rs, long a_ks,
                      const float *b, long b_ks, float *c, long ldc, int n, float alpha, float beta) {
    __m256 acc[MR][2];
    const __m256i b_mask[2] = {lanes8(n), lanes8(n - 8)};
#pragma GCC unroll 6
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    const bool next_rows = (form & C_TRANS) && k < SHORT_ROWS;
    for (int i = 0; i < m && !(form & C_TRANS); i++) /* C's lines arrive in L2 while the tile is computed */
        for (int h = 0; h < halves; h++) _mm_prefetch((const char *)(c + i * ldc + 8 * h), _MM_HINT_T1);
    /* Four k steps per loop iteration: the loop's own counter, compare and branch
     * otherwise take issue slots from the twelve FMAs (micro-kernel alone on panels in
     * L2: 33-35 -> 36-37 flops per TSC cycle; whole products +3-8%, 1 thread). */
#pragma GCC unroll 4
    for (long p = 0; p < k; p++) {
        __m256 bv[2];
        for (int h = 0; h < halves; h++)
            bv[h] = form & B_EDGE ? _mm256_maskload_ps(b + p * b_ks + 8 * h, b_mask[h])
                                  : _mm256_loadu_ps(b + p * b_ks + 8 * h);
        if (!(form & B_ROWS)) _mm_prefetch((const char *)(b + (p + PREFETCH_STEPS) * b_ks), _MM_HINT_T0);
        if (a_rs == 1 && (p & 1) == 0) _mm_prefetch((const char *)(a + (p + PREFETCH_STEPS) * a_ks), _MM_HINT_T0);
        if (next_rows && (p & 15) < MR) _mm_prefetch((const char *)(a + p + (MR + (p & 15)) * a_rs), _MM_HINT_T0);
#pragma GCC unroll 6
        for (int i = 0; i < m; i++) {
            __m256 ai = _mm256_broadcast_ss(a + p * a_ks + i * a_rs);
            for (int h = 0; h < halves; h++) acc[i][h] = _mm256_fmadd_ps(ai, bv[h], acc[i][h]);
        }
    }
    if (form & C_TRANS) store_cols(m, halves, acc, c, ldc, n, alpha, beta);
    else store_rows(m, halves, acc, c, ldc, n, alpha, beta);
}

#define TILE_VARIANTS(X) X(1) X(2) X(3) X(4) X(5) X(6)

#define PACKED_TILE(M)                                                                                                \
    static void packed_tile_##M(long k, const void *a, const void *b, float *c, long ldc, int n, float alpha,      \
                                float beta) {                                                                      \
        if (n > 8) tile_body(M, 2, 0, k, a, 1, MR, b, NR, c, ldc, n, alpha, beta);                                 \
        else tile_body(M, 1, 0, k, a, 1, MR, b, NR, c, ldc, n, alpha, beta);                                       \
    }                                                                                                                 \
    static void small_tile_##M(long k, const float *a, long a_rs, long a_ks, const float *b, long ldb, float *c,    \
                               long ldc, int n, float alpha, float beta) {                                         \
        if (n == NR) tile_body(M, 2, B_ROWS, k, a, a_rs, a_ks, b, ldb, c, ldc, n, alpha, beta);                    \
        else if (n > 8) tile_body(M, 2, B_ROWS | B_EDGE, k, a, a_rs, a_ks, b, ldb, c, ldc, n, alpha, beta);        \
        else tile_body(M, 1, B_ROWS | B_EDGE, k, a, a_rs, a_ks, b, ldb, c, ldc, n, alpha, beta);                   \
    }                                                                                                                 \
    static void trans_tile_##M(long k, const float *a, long lda, const void *b, float *c, long ldc, int n,          \
                               float alpha, float beta) {                                                          \
        if (n > 8) tile_body(M, 2, C_TRANS, k, a, lda, 1, b, NR, c, ldc, n, alpha, beta);                          \
        else tile_body(M, 1, C_TRANS, k, a, lda, 1, b, NR, c, ldc, n, alpha, beta);                                \
    }                                                                                                                 \
    static void rows_tile_##M(long k, const float *a, long lda, const void *b, float *c, long ldc, int n,           \
                              float alpha, float beta) {                                                           \
        if (n > 8) tile_body(M, 2, 0, k, a, lda, 1, b, NR, c, ldc, n, alpha, beta);                                \
        else tile_body(M, 1, 0, k, a, lda, 1, b, NR, c, ldc, n, alpha, beta);                                      \
    }
TILE_VARIANTS(PACKED_TILE)

typedef void (*packed_fn)(long, const void *, const void *, float *, long, int, float, float);
typedef void (*trans_fn)(long, const float *, long, const void *, float *, long, int, float, float);
#define LIST_PACKED(M) packed_tile_##M,
#define LIST_SMALL(M) small_tile_##M,
#define LIST_TRANS(M) trans_tile_##M,
#define LIST_ROWS(M) rows_tile_##M,
static const packed_fn packed_tiles[MR] = {TILE_VARIANTS(LIST_PACKED)};
static const trans_fn trans_tiles[MR] = {TILE_VARIANTS(LIST_TRANS)};
static const trans_fn rows_tiles[MR] = {TILE_VARIANTS(LIST_ROWS)};

/* The small path's tiles are the blocked path's 6 x 16, on A and B in place, for every
 * strip of B (no narrow tile of its own). */
enum { SMALL_MR = MR, SMALL_NR = NR, SMALL_NARROW_MR = MR, SMALL_NARROW_NR = NR };
static const gemm_small_tile_fn small_tiles[SMALL_MR] = {TILE_VARIANTS(LIST_SMALL)};
#define SMALL_STRIP cf_gemm_strip_f32_avx2
#include "gemm_small.h"

static void tile(long k, const void *a, const void *b, float *c, long ldc, int m, int n, float alpha, float beta) {
    packed_tiles[m - 1](k, a, b, c, ldc, n, alpha, beta);
}

static void tile_direct(long k, const float *a, long lda, const void *b, float *c, long ldc, int m, int n,
                        float alpha, float beta, bool c_trans) {
    (c_trans ? trans_tiles : rows_tiles)[m - 1](k, a, lda, b, c, ldc, n, alpha, beta);
}

INLINE float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 values of a row from index p (f32, or bf16 widened to f32: its bits are the top half
 * of the f32's), zero from index k on. */
INLINE __m256 load_row8(const void *row, long p, long k, const bool bf16) {
    if (!bf16) return _mm256_maskload_ps((const float *)row + p, lanes8(k - p));
    const uint16_t *q = (const uint16_t *)row + p;
    __m128i h;
    if (k - p >= 8) {
        h = _mm_loadu_si128((const __m128i *)q);
    } else {
        uint16_t tail[8] = {0};
        memcpy(tail, q, sizeof(uint16_t) * (size_t)(k - p));
        h = _mm_loadu_si128((const __m128i *)tail);
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Dot products of up to 4 rows of A (f32) with 3 rows of B, 8 k values at a time; B's rows
 * f32, or bf16 widened in registers (bf16 decode on CPUs without vdpbf16ps). */
INLINE void dot_block(const int rows, const int cols, long k, const float *a, long lda, const void *b, long ldb,
                      float *c, long ldc, float alpha, float beta, const bool bf16) {
    const size_t elem = bf16 ? sizeof(uint16_t) : sizeof(float);
    const char *bb = b;
    __m256 acc[SKINNY_NT_ROWS][SKINNY_NT_COLS];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) acc[i][j] = _mm256_setzero_ps();
    for (long p = 0; p < k; p += 8) {
        __m256 bv[SKINNY_NT_COLS];
        for (int j = 0; j < cols; j++) {
            const char *row = bb + (size_t)(j * ldb) * elem;
            /* The next group's rows, a line at a time, so that their first lines are in
             * flight before it starts: here that beat fetching each row's own line 512
             * bytes ahead, which AVX-512 does (-5..-9%, 1 thread, CFORMERS_ISA=avx2 on
             * the AVX-512 machine, M = 1..8, f32 and bf16). */
            if (p % 16 == 0)
                _mm_prefetch(row + (size_t)(cols * ldb + p) * elem, _MM_HINT_T0);
            bv[j] = load_row8(row, p, k, bf16);
        }
        for (int i = 0; i < rows; i++) {
            __m256 av = _mm256_maskload_ps(a + i * lda + p, lanes8(k - p));
            for (int j = 0; j < cols; j++) acc[i][j] = _mm256_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float r = alpha * hsum(acc[i][j]);
            float *cij = c + i * ldc + j;
            *cij = beta == 0.0f ? r : r + beta * *cij;
        }
}

INLINE void dot_rows_cols(int rows, int cols, long k, const void *a, long lda, const void *b, long ldb, float *c,
                          long ldc, float alpha, float beta, const bool bf16) {
    switch (rows * SKINNY_NT_COLS + cols) {
#define DOT_CASE(R, C)                                                                                                \
    case R * SKINNY_NT_COLS + C: dot_block(R, C, k, a, lda, b, ldb, c, ldc, alpha, beta, bf16); break;
        DOT_CASE(1, 1) DOT_CASE(1, 2) DOT_CASE(1, 3)
        DOT_CASE(2, 1) DOT_CASE(2, 2) DOT_CASE(2, 3)
        DOT_CASE(3, 1) DOT_CASE(3, 2) DOT_CASE(3, 3)
        DOT_CASE(4, 1) DOT_CASE(4, 2) DOT_CASE(4, 3)
#undef DOT_CASE
    }
}

static void dot(int rows, int cols, long k, const void *a, long lda, const void *b, long ldb, float *c, long ldc,
                float alpha, float beta) {
    dot_rows_cols(rows, cols, k, a, lda, b, ldb, c, ldc, alpha, beta, false);
}

static void dot_bf16(int rows, int cols, long k, const void *a, long lda, const void *b, long ldb, float *c, long ldc,
                     float alpha, float beta) {
    dot_rows_cols(rows, cols, k, a, lda, b, ldb, c, ldc, alpha, beta, true);
}

const gemm_kernel cf_gemm_kernel_f32_avx2 = {
    .name = "avx2-f32", .mr = MR, .nr = NR, .k_group = 1, .elem_bytes = 4, .macs_per_cycle = 16,
    .pack_a = cf_gemm_pack_a_f32_avx2, .pack_b = cf_gemm_pack_b_f32_avx2, .tile = tile,
    .tile_direct = tile_direct, .kc_max = KC_MAX};

const gemm_skinny cf_gemm_skinny_avx2 = {
    .nn = gemm_skinny_rows, .small = small, .small_rows = SMALL_MR, .small_cols = SMALL_NR, .dot = dot,
    .dot_bf16 = dot_bf16, .dot_rows = SKINNY_NT_ROWS, .dot_cols = SKINNY_NT_COLS};
