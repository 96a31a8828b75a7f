/* AVX-512 f32 kernels: a 12 x 32 micro-tile (24 zmm accumulators; per k step two
 * vector loads of B and twelve broadcasts of A), and the unpacked decode paths.
 * Compiled with -mavx512f etc.; reached only when cf_isa_active() says AVX-512. */
#include "gemm_internal.h"

#include <immintrin.h>

enum { MR = 12, NR = 32, SKINNY_NT_ROWS = 4, SKINNY_NT_COLS = 4, B_PREFETCH = 8 };

#define INLINE static inline __attribute__((always_inline))

INLINE __mmask16 lanes(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* Writes alpha * acc (+ beta * C) to an m x n corner of C under masks. */
INLINE void store_rows(const int m, __m512 acc[][2], float *c, long ldc, int n, float alpha, float beta) {
    __mmask16 k0 = lanes(n), k1 = lanes(n - 16);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        __m512 r0 = _mm512_mul_ps(va, acc[i][0]), r1 = _mm512_mul_ps(va, acc[i][1]);
        if (beta != 0.0f) {
            r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k0, ci), r0);
            r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k1, ci + 16), r1);
        }
        _mm512_mask_storeu_ps(ci, k0, r0);
        _mm512_mask_storeu_ps(ci + 16, k1, r1);
    }
}

/* The register tile: m rows (a compile-time constant after inlining) by 32 columns.
 * A(i, k) = a[i*a_rs + k*a_ks], B(k, j) = b[k*b_ks + j]; with `b_cols` < 32 the B
 * loads are masked (unpacked B may end there). */
INLINE void tile_body(const int m, long k, const float *a, long a_rs, long a_ks, const float *b, long b_ks,
                      int b_cols, float *c, long ldc, int n, float alpha, float beta) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < m; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    __mmask16 bk0 = lanes(b_cols), bk1 = lanes(b_cols - 16);
    for (int i = 0; i < m; i++) { /* C's lines arrive in L2 while the tile is computed */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T1);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T1);
    }
    for (long p = 0; p < k; p++) {
        __m512 b0, b1;
        if (b_ks == NR) { /* packed B streams from L2: fetch it into L1 ahead of use */
            _mm_prefetch((const char *)(b + B_PREFETCH * NR), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + B_PREFETCH * NR + 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(a + B_PREFETCH * MR), _MM_HINT_T0);
        }
        if (b_cols >= NR) {
            b0 = _mm512_loadu_ps(b);
            b1 = _mm512_loadu_ps(b + 16);
        } else {
            b0 = _mm512_maskz_loadu_ps(bk0, b);
            b1 = _mm512_maskz_loadu_ps(bk1, b + 16);
        }
#pragma GCC unroll 12
        for (int i = 0; i < m; i++) {
            __m512 ai = _mm512_set1_ps(a[i * a_rs]);
            acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
        }
        a += a_ks;
        b += b_ks;
    }
    store_rows(m, acc, c, ldc, n, alpha, beta);
}

/* One function per row count, so every variant keeps its accumulators in registers. */
#define TILE_VARIANTS(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)

#define PACKED_TILE(M)                                                                                                \
    static void packed_tile_##M(long k, const void *a, const void *b, float *c, long ldc, int n, float alpha,      \
                                float beta) {                                                                      \
        tile_body(M, k, a, 1, MR, b, NR, NR, c, ldc, n, alpha, beta);                                              \
    }
TILE_VARIANTS(PACKED_TILE)

#define STRIDED_TILE(M)                                                                                               \
    static void strided_tile_##M(long k, const float *a, long a_rs, long a_ks, const float *b, long ldb, int n,     \
                                 float *c, long ldc, float alpha, float beta) {                                     \
        tile_body(M, k, a, a_rs, a_ks, b, ldb, n, c, ldc, n, alpha, beta);                                         \
    }
TILE_VARIANTS(STRIDED_TILE)

typedef void (*packed_fn)(long, const void *, const void *, float *, long, int, float, float);
typedef void (*strided_fn)(long, const float *, long, long, const float *, long, int, float *, long, float, float);
#define LIST_PACKED(M) packed_tile_##M,
#define LIST_STRIDED(M) strided_tile_##M,
static const packed_fn packed_tiles[MR] = {TILE_VARIANTS(LIST_PACKED)};
static const strided_fn strided_tiles[MR] = {TILE_VARIANTS(LIST_STRIDED)};

static void tile(long k, const void *a, const void *b, float *c, long ldc, int m, int n, float alpha, float beta) {
    packed_tiles[m - 1](k, a, b, c, ldc, n, alpha, beta);
}

static void skinny_nn(long m, long n, long k, float alpha, const float *a, long a_rs, long a_ks, const float *b,
                      long ldb, float beta, float *c, long ldc) {
    for (long j = 0; j < n; j += NR) {
        int cols = n - j < NR ? (int)(n - j) : NR;
        strided_tiles[m - 1](k, a, a_rs, a_ks, b + j, ldb, cols, c + j, ldc, alpha, beta);
    }
}

/* Dot products of up to 4 rows of A with 4 rows of B, 16 k values at a time; the
 * 16 lanes of each accumulator are summed at the end. */
INLINE void dot_block(const int rows, const int cols, long k, const float *a, long lda, const float *b, long ldb,
                      float *c, long ldc, float alpha, float beta) {
    __m512 acc[SKINNY_NT_ROWS][SKINNY_NT_COLS];
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) acc[i][j] = _mm512_setzero_ps();
    for (long p = 0; p < k; p += 16) {
        __mmask16 mk = lanes((int)(k - p < 16 ? k - p : 16));
        __m512 bv[SKINNY_NT_COLS];
        for (int j = 0; j < cols; j++) bv[j] = _mm512_maskz_loadu_ps(mk, b + j * ldb + p);
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

static void dot_rows(int rows, int cols, long k, const float *a, long lda, const float *b, long ldb, float *c,
                     long ldc, float alpha, float beta) {
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

static void skinny_nt(long m, long n, long k, float alpha, const float *a, long lda, const float *b, long ldb,
                      float beta, float *c, long ldc) {
    for (long j = 0; j < n; j += SKINNY_NT_COLS) {
        int cols = n - j < SKINNY_NT_COLS ? (int)(n - j) : SKINNY_NT_COLS;
        for (long i = 0; i < m; i += SKINNY_NT_ROWS) {
            int rows = m - i < SKINNY_NT_ROWS ? (int)(m - i) : SKINNY_NT_ROWS;
            dot_rows(rows, cols, k, a + i * lda, lda, b + j * ldb, ldb, c + i * ldc + j, ldc, alpha, beta);
        }
    }
}

const gemm_kernel cf_gemm_kernel_f32_avx512 = {
    .name = "avx512-f32", .mr = MR, .nr = NR, .k_group = 1, .elem_bytes = 4,
    .pack_a = cf_gemm_pack_a_f32_avx512, .pack_b = cf_gemm_pack_b_f32_avx512, .tile = tile};

const gemm_skinny cf_gemm_skinny_avx512 = {.mr = MR, .nn = skinny_nn, .nt = skinny_nt};
