/* Flash-attention tiles for AVX2 + FMA (16 ymm registers, 8 lanes): a register-blocked
 * product, 4 rows x up to 24 columns of C in 12 ymm accumulators (with 3 B vectors and
 * one broadcast of A: 16 registers), B copied into a contiguous zero-padded stripe
 * first; the bf16 product widens its operands to f32 inside that copy (and A into a
 * small f32 tile), never in a separate pass over memory; P and dS rounded into bf16
 * tiles with vector code; the softmax rows of exp_rows_avx2.c.
 *
 * The portable tiles' product (flash_attention_tiles.h), compiled for AVX2, loads and
 * stores C once per k: it ran flash attention at 0.3-0.55x the unfused op on AVX2
 * (docs/avx2-flash-attention.md). */
#include <immintrin.h>
#include <string.h>

#include "kernels/flash_attention.h"

enum { ROWS = 4, MAX_VECS = 3, LANES = 8 };
/* A stripe of B: STRIPE_K rows of STRIPE_N columns (16 KiB of f32, in L1). */
enum { STRIPE_N = 64, STRIPE_K = 64 };

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 4")

static long min_l(long a, long b) { return a < b ? a : b; }

/* All ones in the lanes below n. */
INLINE __m256i first_lanes(long n) {
    int k = n >= LANES ? LANES : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* C[rows x vecs*8] (+)= A[rows x K] B[K x ...], B contiguous with leading dimension
 * ldb and zero beyond the block's columns (so always read whole); the last vector of C
 * is loaded and stored under `tail` when `tailed`. rows, vecs and tailed are constants
 * after inlining. */
INLINE void block(int rows, int vecs, bool tailed, long K, const float *A, long a_rs, long a_cs, const float *B,
                  long ldb, float *C, long ldc, __m256i tail, bool accumulate) {
    __m256 c[ROWS][MAX_VECS];
    UNROLL for (int r = 0; r < rows; r++) UNROLL for (int v = 0; v < vecs; v++) {
        float *p = C + r * ldc + v * LANES;
        c[r][v] = !accumulate            ? _mm256_setzero_ps()
                  : tailed && v == vecs - 1 ? _mm256_maskload_ps(p, tail)
                                            : _mm256_loadu_ps(p);
    }
    for (long k = 0; k < K; k++) {
        __m256 b[MAX_VECS];
        UNROLL for (int v = 0; v < vecs; v++) b[v] = _mm256_load_ps(B + k * ldb + v * LANES);
        UNROLL for (int r = 0; r < rows; r++) {
            __m256 a = _mm256_broadcast_ss(A + r * a_rs + k * a_cs);
            UNROLL for (int v = 0; v < vecs; v++) c[r][v] = _mm256_fmadd_ps(a, b[v], c[r][v]);
        }
    }
    UNROLL for (int r = 0; r < rows; r++) UNROLL for (int v = 0; v < vecs; v++) {
        float *p = C + r * ldc + v * LANES;
        if (tailed && v == vecs - 1)
            _mm256_maskstore_ps(p, tail, c[r][v]);
        else
            _mm256_storeu_ps(p, c[r][v]);
    }
}

#define BLOCK_VECS(rows, tailed)                                                                                       \
    switch (vecs) {                                                                                                    \
    case 1: block(rows, 1, tailed, K, A, a_rs, a_cs, B, ldb, C, ldc, tail, accumulate); break;                         \
    case 2: block(rows, 2, tailed, K, A, a_rs, a_cs, B, ldb, C, ldc, tail, accumulate); break;                         \
    default: block(rows, 3, tailed, K, A, a_rs, a_cs, B, ldb, C, ldc, tail, accumulate); break;                        \
    }

/* One block of `rows` (ROWS or 1) rows x n <= MAX_VECS * LANES columns. */
static void block_at(int rows, long n, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb,
                     float *C, long ldc, bool accumulate) {
    int vecs = (int)((n + LANES - 1) / LANES);
    __m256i tail = first_lanes(n - (vecs - 1) * LANES);
    bool tailed = n % LANES != 0;
    if (rows == ROWS) {
        if (tailed) {
            BLOCK_VECS(ROWS, true)
        } else {
            BLOCK_VECS(ROWS, false)
        }
    } else if (tailed) {
        BLOCK_VECS(1, true)
    } else {
        BLOCK_VECS(1, false)
    }
}

/* C[M x n] (+)= A[M x K] times a stripe of B (K <= STRIPE_K rows, n <= STRIPE_N
 * columns, leading dimension STRIPE_N, zero-padded to whole vectors), in blocks of up
 * to 4 rows x 24 columns. */
static void stripe_product(long M, long n, long K, const float *A, long a_rs, long a_cs, const float *tile, float *C,
                           long ldc, bool accumulate) {
    for (long j = 0; j < n; j += MAX_VECS * LANES) {
        long w = min_l(MAX_VECS * LANES, n - j);
        long i = 0;
        for (; i + ROWS <= M; i += ROWS)
            block_at(ROWS, w, K, A + i * a_rs, a_rs, a_cs, tile + j, STRIPE_N, C + i * ldc + j, ldc, accumulate);
        for (; i < M; i++)
            block_at(1, w, K, A + i * a_rs, a_rs, a_cs, tile + j, STRIPE_N, C + i * ldc + j, ldc, accumulate);
    }
}

/* rows x cols of f32 B (leading dimension ldb) into the stripe tile, zeros up to the
 * next whole vector. B's rows are often 2 KiB or 16 KiB apart (V, K^T of a long
 * sequence), which maps them onto a few L1 sets: read in place they fall out of L1
 * between row blocks (see flash_attention_tiles_avx512.c). */
static void copy_stripe(float *dst, const float *B, long ldb, long rows, long cols) {
    for (long k = 0; k < rows; k++)
        for (long c = 0; c < cols; c += LANES)
            _mm256_store_ps(dst + k * STRIPE_N + c, _mm256_maskload_ps(B + k * ldb + c, first_lanes(cols - c)));
}

static void gemm(long M, long N, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb, float *C,
                 long ldc, bool accumulate) {
    _Alignas(32) float tile[STRIPE_K * STRIPE_N];
    for (long j0 = 0; j0 < N; j0 += STRIPE_N)
        for (long k0 = 0; k0 < K; k0 += STRIPE_K) { /* in k order: the same sums as in one pass */
            long cols = min_l(STRIPE_N, N - j0), kk = min_l(STRIPE_K, K - k0);
            copy_stripe(tile, B + k0 * ldb + j0, ldb, kk, cols);
            stripe_product(M, cols, kk, A + k0 * a_cs, a_rs, a_cs, tile, C + j0, ldc, accumulate || k0 > 0);
        }
}

/* ---- bf16: widened to f32 in the copies, then the f32 blocks ---- */

/* 8 bf16 to f32. */
INLINE __m256 widen8(const cf_bf16 *x) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)x)), 16));
}

/* rows x cols of bf16 A (leading dimension lda) widened into dst (leading dimension
 * cols). */
static void widen_a(float *dst, const cf_bf16 *A, long lda, long rows, long cols) {
    for (long i = 0; i < rows; i++) {
        const cf_bf16 *a = A + i * lda;
        float *d = dst + i * cols;
        long c = 0;
        for (; c + LANES <= cols; c += LANES) _mm256_storeu_ps(d + c, widen8(a + c));
        for (; c < cols; c++) d[c] = cf_bf16_to_f32(a[c]);
    }
}

/* Rows [k0, k0 + rows) (k0 even) x cols of B packed in pairs along K (see
 * cf_fa_gemm_bf16_fn) widened into the stripe tile, zeros up to the next whole vector:
 * each word gives the element of an even row (low half) and of the next (high half). */
static void widen_stripe(float *dst, const uint32_t *B, long ldb, long rows, long cols) {
    const __m256i high = _mm256_set1_epi32((int)0xFFFF0000u);
    for (long k = 0; k < rows; k += 2) {
        const uint32_t *pairs = B + k / 2 * ldb;
        for (long c = 0; c < cols; c += LANES) {
            __m256i w = _mm256_maskload_epi32((const int *)(pairs + c), first_lanes(cols - c));
            _mm256_store_ps(dst + k * STRIPE_N + c, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
            if (k + 1 < rows)
                _mm256_store_ps(dst + (k + 1) * STRIPE_N + c, _mm256_castsi256_ps(_mm256_and_si256(w, high)));
        }
    }
}

void cf_fa_gemm_bf16_avx2(long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C,
                          long ldc, bool accumulate) {
    _Alignas(32) float tile[STRIPE_K * STRIPE_N];
    enum { A_ROWS = 64 };
    float a[A_ROWS * STRIPE_K];
    for (long k0 = 0; k0 < K; k0 += STRIPE_K) /* STRIPE_K even: stripes start on whole pairs */
        for (long i0 = 0; i0 < M; i0 += A_ROWS) {
            long m = min_l(A_ROWS, M - i0), kk = min_l(STRIPE_K, K - k0);
            widen_a(a, A + i0 * lda + k0, lda, m, kk);
            for (long j0 = 0; j0 < N; j0 += STRIPE_N) {
                long cols = min_l(STRIPE_N, N - j0);
                widen_stripe(tile, B + k0 / 2 * ldb + j0, ldb, kk, cols);
                stripe_product(m, cols, kk, a, kk, 1, tile, C + i0 * ldc + j0, ldc, accumulate || k0 > 0);
            }
        }
}

/* ---- P and dS rounded into bf16 operand tiles ---- */

/* x rounded to bf16 (to nearest even; P and dS are finite), in the high halves. */
INLINE __m256i round_high(__m256 x) {
    __m256i u = _mm256_castps_si256(x);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF)));
}

/* The bf16 of 8 floats as 8 halves, in order. */
INLINE __m128i round8(__m256 x) {
    __m256i r = _mm256_srli_epi32(round_high(x), 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static void pack_rows(cf_bf16 *dst, const float *x, long rows, long cols) {
    long n = rows * cols, i = 0;
    for (; i + LANES <= n; i += LANES) _mm_storeu_si128((__m128i *)(dst + i), round8(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) dst[i] = cf_f32_to_bf16(x[i]);
}

/* 8 x 8 floats transposed in registers (r[i] = row i in, column i out). */
INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* dst[c * ld + r] = bf16(x[r * cols + c]), ld = rows rounded up to even, a zero in the
 * gap: 8 x 8 blocks transposed in registers, the edges one by one. */
static void pack_cols(cf_bf16 *dst, const float *x, long rows, long cols) {
    long ld = rows + rows % 2, r8 = rows / LANES * LANES, c8 = cols / LANES * LANES;
    for (long r = 0; r < r8; r += LANES)
        for (long c = 0; c < c8; c += LANES) {
            __m256 v[8];
            for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_ps(x + (r + i) * cols + c);
            transpose8(v);
            for (int i = 0; i < 8; i++) _mm_storeu_si128((__m128i *)(dst + (c + i) * ld + r), round8(v[i]));
        }
    for (long c = 0; c < cols; c++) {
        for (long r = c < c8 ? r8 : 0; r < rows; r++) dst[c * ld + r] = cf_f32_to_bf16(x[r * cols + c]);
        if (rows % 2) dst[c * ld + rows] = 0;
    }
}

const cf_fa_tiles cf_fa_tiles_avx2 = {.gemm = gemm, .pack_rows = pack_rows, .pack_cols = pack_cols,
                                      .rows = &cf_exp_rows_avx2};
