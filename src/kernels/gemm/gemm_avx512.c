/* AVX-512 f32 kernels: a 12 x 32 micro-tile (24 zmm accumulators; per k step two
 * vector loads of B and twelve broadcasts of A), the small path's 6 x 64 (12 x 32 on
 * narrow strips) reading A and B in place, and the unpacked decode paths.
 * Compiled with -mavx512f etc.; reached only through the AVX-512 kernel context (kernels/context/avx512.c). */
#include "gemm_avx512_inline.h"
#include "gemm_internal.h"

#include <stdbool.h>

enum { MR = 12, NR = 32, SMALL_MR = 6, SMALL_NR = 16 * TILE_MAX_VECS, SKINNY_NT_ROWS = 4, SKINNY_NT_COLS = 4,
       PREFETCH_STEPS = 8, SKINNY_NN_WINDOW = 2048, SHORT_ROWS = 384 };

/* How a tile reads its operands and writes C (constants after inlining). */
enum {
    A_PACKED = 1, /* A from a packed panel, fetched ahead into L1; else A's own rows or columns */
    B_ROWS = 2,   /* B's own rows, loaded under masks past column n; else a zero-padded packed panel */
    C_TRANS = 4,  /* C stored transposed: C(i, j) at c[i + j*ldc] */
};

/* The register tile: m rows by 16 * vecs columns (both constants after inlining).
 * A(i, k) = a[i*a_rs + k*a_ks]: a packed panel (a_rs = 1, a_ks = MR), A's own rows
 * (a_rs = lda, a_ks = 1) or A's columns, A transposed (a_rs = 1, a_ks = lda).
 * B(k, j) = b[k*b_ks + j]: a packed panel (b_ks = NR) or B's own rows (b_ks = ldb).
 * With C_TRANS (the transposed product of gemm.c: A's rows are B's, read once each) where
 * the rows are shorter than SHORT_ROWS, the hardware prefetcher has too short a run to
 * follow, so the tile fetches the next tile's rows as it goes: K = 288, 1 thread,
 * +24..+48% on 8..32 x 2048..32000 x 288; longer rows -5..+3%. */
GEMM_INLINE void tile_body(const int m, const int vecs, const int form, long k, const float *a, long a_rs, long a_ks,
                           const float *b, long b_ks, float *c, long ldc, int n, float alpha, float beta) {
    const bool c_trans = form & C_TRANS;
    __m512 acc[MR][TILE_MAX_VECS];
    const __mmask16 b_mask[TILE_MAX_VECS] = {lanes16(n), lanes16(n - 16), lanes16(n - 32), lanes16(n - 48)};
#pragma GCC unroll 12
    for (int i = 0; i < m; i++)
        for (int v = 0; v < vecs; v++) acc[i][v] = _mm512_setzero_ps();
    const bool next_rows = c_trans && k < SHORT_ROWS;
    for (int i = 0; i < m && !c_trans; i++) /* C's lines arrive in L2 while the tile is computed */
        for (int v = 0; v < vecs; v++) _mm_prefetch((const char *)(c + i * ldc + 16 * v), _MM_HINT_T1);
    for (int j = 0; j < n && c_trans; j++) _mm_prefetch((const char *)(c + j * ldc), _MM_HINT_T1);
    /* A read in place: each row at one of three bases four rows apart plus 0..3 strides,
     * which x86 addressing reaches from two stride registers. Twelve row pointers spilled
     * six general registers inside the k loop (in one process, interleaved, 1 thread:
     * 16 x 8192 x 2048 NT +8%, 16 x 32000 x 288 NT +10%, 2048 x 288 x 768 NT +3%, 512^3
     * +2%, 512 x 288 x 32000 +2%, 64 x 2048 x 768 NT even; 2 threads +3..+8%). A base
     * past the tile's rows stays at a: it would point outside A. quad[0] is a itself, and
     * serves a packed panel too. */
    const float *quad[3] = {a, a + (m > 4 ? 4 * a_rs : 0), a + (m > 8 ? 8 * a_rs : 0)};
    for (long p = 0; p < k; p++) {
        /* B streams from L2 and A's lines get evicted by it: fetch both into L1 ahead
         * (A's rows read in place are sequential streams the hardware prefetcher follows). */
        __m512 bv[TILE_MAX_VECS];
        const float *b_ahead = b + PREFETCH_STEPS * b_ks; /* one register, whatever b_ks */
        for (int v = 0; v < vecs; v++) {
            _mm_prefetch((const char *)(b_ahead + 16 * v), _MM_HINT_T0);
            bv[v] = form & B_ROWS ? _mm512_maskz_loadu_ps(b_mask[v], b + 16 * v) : _mm512_loadu_ps(b + 16 * v);
        }
        if (form & A_PACKED) _mm_prefetch((const char *)(quad[0] + PREFETCH_STEPS * MR), _MM_HINT_T0);
        if (next_rows && (p & 15) < MR) _mm_prefetch((const char *)(quad[0] + (MR + (p & 15)) * a_rs), _MM_HINT_T0);
#pragma GCC unroll 12
        for (int i = 0; i < m; i++) {
            __m512 ai = _mm512_set1_ps(form & A_PACKED ? quad[0][i] : quad[i / 4][(i % 4) * a_rs]);
            for (int v = 0; v < vecs; v++) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
        }
        for (int q = 0; q < 3; q++) quad[q] += a_ks;
        b += b_ks;
    }
    if (c_trans) store_tile_cols(m, vecs, acc, c, ldc, n, alpha, beta);
    else store_tile_rows(m, vecs, acc, c, ldc, n, alpha, beta);
}

/* One function per row count and width, so every variant keeps its accumulators in
 * registers. The blocked path's tiles are 12 x 32, or 12 x 16 where the last panel of B
 * has at most 16 columns (the zero padding of an N = 100 product then costs 12 of 128
 * columns instead of 28: 4096 x 100 x 100 was 0.81x oneDNN). */
#define TILE_VARIANTS(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)
#define PACKED_TILE(M)                                                                                                \
    static void tile_##M(long k, const void *a, const void *b, float *c, long ldc, int n, float alpha, float beta) { \
        if (n > 16) tile_body(M, 2, A_PACKED, k, a, 1, MR, b, NR, c, ldc, n, alpha, beta);                         \
        else tile_body(M, 1, A_PACKED, k, a, 1, MR, b, NR, c, ldc, n, alpha, beta);                                \
    }                                                                                                                 \
    static void direct_tile_##M(long k, const float *a, long lda, const void *b, float *c, long ldc, int n,         \
                                float alpha, float beta, bool c_trans) {                                           \
        if (c_trans && n > 16) tile_body(M, 2, C_TRANS, k, a, lda, 1, b, NR, c, ldc, n, alpha, beta);              \
        else if (c_trans) tile_body(M, 1, C_TRANS, k, a, lda, 1, b, NR, c, ldc, n, alpha, beta);                   \
        else if (n > 16) tile_body(M, 2, 0, k, a, lda, 1, b, NR, c, ldc, n, alpha, beta);                          \
        else tile_body(M, 1, 0, k, a, lda, 1, b, NR, c, ldc, n, alpha, beta);                                      \
    }
TILE_VARIANTS(PACKED_TILE)

/* The small path's tiles: SMALL_MR rows of A (its rows or, transposed, its columns) by up
 * to four vectors of B's columns, both read in place. Six rows by four vectors beat the
 * blocked path's twelve by two there (1 thread, 11-15 interleaved rounds: 64^3 +6..+21%,
 * 128^3 +14%, 64 x 256 x 64 +13%): a tile has K steps to amortise its set-up and stores
 * over, which are few in a small product, and six rows of A in place take fewer general
 * registers. A strip of B at most two vectors wide takes twelve rows instead (the same
 * functions from 7 rows on): six by two or one vectors hold only 12 or 6 accumulators and
 * load more per multiply-add (against them, interleaved: 128 x 8 x 128 +30%, 128 x 16 x 128
 * +28%, 512 x 32 x 64 +10%, 256 x 32 x 256 +7%; 2 threads +7..+20%). */
#define SMALL_TILE(M)                                                                                                 \
    static void small_tile_##M(long k, const float *a, long a_rs, long a_ks, const float *b, long ldb, float *c,    \
                               long ldc, int n, float alpha, float beta) {                                         \
        if (M <= SMALL_MR && n > 48) tile_body(M, 4, B_ROWS, k, a, a_rs, a_ks, b, ldb, c, ldc, n, alpha, beta);    \
        else if (M <= SMALL_MR && n > 32) tile_body(M, 3, B_ROWS, k, a, a_rs, a_ks, b, ldb, c, ldc, n, alpha, beta); \
        else if (n > 16) tile_body(M, 2, B_ROWS, k, a, a_rs, a_ks, b, ldb, c, ldc, n, alpha, beta);                \
        else tile_body(M, 1, B_ROWS, k, a, a_rs, a_ks, b, ldb, c, ldc, n, alpha, beta);                            \
    }
TILE_VARIANTS(SMALL_TILE)

typedef void (*tile_fn)(long, const void *, const void *, float *, long, int, float, float);
typedef void (*direct_tile_fn)(long, const float *, long, const void *, float *, long, int, float, float, bool);
#define LIST_TILE(M) tile_##M,
#define LIST_DIRECT_TILE(M) direct_tile_##M,
#define LIST_SMALL_TILE(M) small_tile_##M,
static const tile_fn tiles[MR] = {TILE_VARIANTS(LIST_TILE)};
static const direct_tile_fn direct_tiles[MR] = {TILE_VARIANTS(LIST_DIRECT_TILE)};
/* Up to SMALL_MR rows any width up to SMALL_NR; up to MR rows at most NR columns. */
static const gemm_small_tile_fn small_tiles[MR] = {TILE_VARIANTS(LIST_SMALL_TILE)};
enum { SMALL_NARROW_MR = MR, SMALL_NARROW_NR = NR };
#define SMALL_STRIP cf_gemm_strip_f32_avx512
#include "gemm_small.h"

static void tile(long k, const void *a, const void *b, float *c, long ldc, int m, int n, float alpha, float beta) {
    tiles[m - 1](k, a, b, c, ldc, n, alpha, beta);
}

static void tile_direct(long k, const float *a, long lda, const void *b, float *c, long ldc, int m, int n,
                        float alpha, float beta, bool c_trans) {
    direct_tiles[m - 1](k, a, lda, b, c, ldc, n, alpha, beta, c_trans);
}

/* Decode with B not transposed: C's rows stay in L1 while B streams by rows, so B is
 * read in long contiguous runs (reading it in 32-column strips would touch a new page
 * at every k). C = beta * C first; then per 4 rows of B and 16 columns, the four B
 * vectors are loaded once and applied to every row of C. */
static void skinny_nn(long m, long n, long k, float alpha, const float *a, long a_rs, long a_ks, const float *b,
                      long ldb, float beta, float *c, long ldc) {
    for (long j0 = 0; j0 < n; j0 += SKINNY_NN_WINDOW) {
        long w = n - j0 < SKINNY_NN_WINDOW ? n - j0 : SKINNY_NN_WINDOW;
        for (long i = 0; i < m; i++)
            for (long v = 0; v < w; v += 16) {
                float *ci = c + i * ldc + j0 + v;
                __mmask16 mask = lanes16((int)(w - v));
                __m512 old = beta == 0.0f ? _mm512_setzero_ps() : _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, ci));
                _mm512_mask_storeu_ps(ci, mask, old);
            }
        for (long p = 0; p < k; p += 4) {
            int rows = k - p < 4 ? (int)(k - p) : 4;
            const float *bp = b + p * ldb + j0;
            for (long v = 0; v < w; v += 16) {
                __mmask16 mask = lanes16((int)(w - v));
                __m512 bv[4];
                for (int r = 0; r < 4; r++) bv[r] = r < rows ? _mm512_maskz_loadu_ps(mask, bp + r * ldb + v) : _mm512_setzero_ps();
                for (long i = 0; i < m; i++) {
                    const float *ai = a + i * a_rs + p * a_ks;
                    float *ci = c + i * ldc + j0 + v;
                    __m512 acc = _mm512_maskz_loadu_ps(mask, ci);
                    for (int r = 0; r < rows; r++) acc = _mm512_fmadd_ps(_mm512_set1_ps(alpha * ai[r * a_ks]), bv[r], acc);
                    _mm512_mask_storeu_ps(ci, mask, acc);
                }
            }
        }
    }
}

/* Dot products of up to 4 rows of A with 4 rows of B, 16 k values at a time; the
 * 16 lanes of each accumulator are summed at the end. */
GEMM_INLINE void dot_block(const int rows, const int cols, long k, const float *a, long lda, const float *b, long ldb,
                      float *c, long ldc, float alpha, float beta) {
    __m512 acc[SKINNY_NT_ROWS][SKINNY_NT_COLS];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) acc[i][j] = _mm512_setzero_ps();
    for (long p = 0; p < k; p += 16) {
        __mmask16 mk = lanes16((int)(k - p < 16 ? k - p : 16));
        __m512 bv[SKINNY_NT_COLS];
        for (int j = 0; j < cols; j++) {
            prefetch_row_ahead(b + j * ldb + p); /* past the matrix's end is harmless */
            bv[j] = _mm512_maskz_loadu_ps(mk, b + j * ldb + p);
        }
        for (int i = 0; i < rows; i++) {
            __m512 av = _mm512_maskz_loadu_ps(mk, a + i * lda + p);
            for (int j = 0; j < cols; j++) acc[i][j] = _mm512_fmadd_ps(av, bv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            float r = alpha * _mm512_reduce_add_ps(acc[i][j]);
            float *cij = c + i * ldc + j;
            *cij = beta == 0.0f ? r : r + beta * *cij;
        }
}

static void dot(int rows, int cols, long k, const void *a, long lda, const void *b, long ldb, float *c, long ldc,
                float alpha, float beta) {
    switch (rows * SKINNY_NT_COLS + cols) {
#define DOT_CASE(R, C)                                                                                                \
    case R * SKINNY_NT_COLS + C: dot_block(R, C, k, a, lda, b, ldb, c, ldc, alpha, beta); break;
        DOT_CASE(1, 1) DOT_CASE(1, 2) DOT_CASE(1, 3) DOT_CASE(1, 4)
        DOT_CASE(2, 1) DOT_CASE(2, 2) DOT_CASE(2, 3) DOT_CASE(2, 4)
        DOT_CASE(3, 1) DOT_CASE(3, 2) DOT_CASE(3, 3) DOT_CASE(3, 4)
        DOT_CASE(4, 1) DOT_CASE(4, 2) DOT_CASE(4, 3) DOT_CASE(4, 4)
#undef DOT_CASE
    }
}

const gemm_kernel cf_gemm_kernel_f32_avx512 = {
    .name = "avx512-f32", .mr = MR, .nr = NR, .k_group = 1, .elem_bytes = 4, .macs_per_cycle = 32,
    .pack_a = cf_gemm_pack_a_f32_avx512, .pack_b = cf_gemm_pack_b_f32_avx512, .tile = tile,
    .tile_direct = tile_direct};

const gemm_skinny cf_gemm_skinny_avx512 = {
    .nn = skinny_nn, .small = small, .small_rows = SMALL_MR, .small_cols = SMALL_NR, .dot = dot,
    .dot_rows = SKINNY_NT_ROWS, .dot_cols = SKINNY_NT_COLS};
