/* Flash-attention tiles for AVX-512: a register-blocked product (4 rows x up to 64
 * columns of C held in 16 zmm accumulators, B copied into a contiguous tile), with the
 * vectorised softmax rows of exp_rows_avx512.c. For bf16 operands, the rounding of P and dS tiles into bf16 (the
 * bf16 products are in flash_attention_tiles_avx512bf16.c and _amx_avx512bf16.c). */
#include <immintrin.h>

#include "kernels/flash_attention.h"
#include "kernels/flash_attention_block_avx512.h"

/* C[rows x vecs*16] (+)= A[rows x K] B[K x ...]. */
INLINE void block(int rows, int vecs, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb, float *C,
                  long ldc, __mmask16 tail, bool accumulate) {
    __m512 c[ROWS][MAX_VECS];
    block_load(rows, vecs, c, C, ldc, tail, accumulate);
    for (long k = 0; k < K; k++) {
        __m512 b[MAX_VECS];
        UNROLL for (int v = 0; v < vecs; v++) b[v] = _mm512_maskz_loadu_ps(lane_mask(v, vecs, tail), B + k * ldb + v * LANES);
        UNROLL for (int r = 0; r < rows; r++) {
            __m512 a = _mm512_set1_ps(A[r * a_rs + k * a_cs]);
            UNROLL for (int v = 0; v < vecs; v++) c[r][v] = _mm512_fmadd_ps(a, b[v], c[r][v]);
        }
    }
    block_store(rows, vecs, c, C, ldc, tail);
}

#define BLOCK_VECS(rows)                                                                                               \
    switch (vecs) {                                                                                                    \
    case 1: block(rows, 1, K, A, a_rs, a_cs, B, ldb, C, ldc, tail, accumulate); break;                                       \
    case 2: block(rows, 2, K, A, a_rs, a_cs, B, ldb, C, ldc, tail, accumulate); break;                                       \
    case 3: block(rows, 3, K, A, a_rs, a_cs, B, ldb, C, ldc, tail, accumulate); break;                                       \
    default: block(rows, 4, K, A, a_rs, a_cs, B, ldb, C, ldc, tail, accumulate); break;                                      \
    }

static void block_4(int vecs, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb, float *C, long ldc,
                    __mmask16 tail, bool accumulate) {
    BLOCK_VECS(4)
}

static void block_1(int vecs, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb, float *C, long ldc,
                    __mmask16 tail, bool accumulate) {
    BLOCK_VECS(1)
}

/* B in stripes of STRIPE x STRIPE, each copied into a contiguous tile first when more
 * than one row block reads it: B's rows are often 2 KiB or 16 KiB apart (V, K^T of a
 * long sequence), which maps them onto a few L1 sets, so read in place the tile falls
 * out of L1 between row blocks, and its cold misses stall the FMAs rather than one
 * tight copy loop (in place, f32 flash attention at T = 2048 ran ~1.3x longer). */
enum { STRIPE = MAX_VECS * LANES };

INLINE __mmask16 first_lanes(long n) { return n >= LANES ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1); }

static void copy_stripe(float *dst, const float *B, long ldb, long rows, long cols) {
    __mmask16 masks[MAX_VECS]; /* zeros beyond cols */
    for (int v = 0; v < MAX_VECS; v++) masks[v] = cols > v * LANES ? first_lanes(cols - v * LANES) : 0;
    for (long k = 0; k < rows; k++)
        for (int v = 0; v < MAX_VECS; v++)
            _mm512_store_ps(dst + k * STRIPE + v * LANES, _mm512_maskz_loadu_ps(masks[v], B + k * ldb + v * LANES));
}

static void gemm(long M, long N, long K, const float *A, long a_rs, long a_cs, const float *B, long ldb, float *C,
                 long ldc, bool accumulate) {
    _Alignas(64) float tile[STRIPE * STRIPE];
    for (long j0 = 0; j0 < N; j0 += STRIPE)
        for (long k0 = 0; k0 < K; k0 += STRIPE) { /* in k order: the same sums as in one pass */
            long cols = N - j0 < STRIPE ? N - j0 : STRIPE, kk = K - k0 < STRIPE ? K - k0 : STRIPE;
            const float *a = A + k0 * a_cs, *b = B + k0 * ldb + j0;
            long ld = ldb;
            if (M > ROWS) {
                copy_stripe(tile, b, ldb, kk, cols);
                b = tile, ld = STRIPE;
            }
            float *c = C + j0;
            bool acc = accumulate || k0 > 0;
            FOR_EACH_BLOCK(M, cols, block_4(vecs, kk, a + i * a_rs, a_rs, a_cs, b + j, ld, c + i * ldc + j, ldc, tail, acc),
                           block_1(vecs, kk, a + i * a_rs, a_rs, a_cs, b + j, ld, c + i * ldc + j, ldc, tail, acc))
        }
}

/* x rounded to bf16 (to nearest even; P and dS are finite), in the high halves. */
INLINE __m512i round_high(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
}

static void pack_rows(cf_bf16 *dst, const float *x, long rows, long cols) {
    long n = rows * cols;
    for (long i = 0; i < n; i += LANES) {
        __mmask16 k = first_lanes(n - i);
        __m512i r = _mm512_srli_epi32(round_high(_mm512_maskz_loadu_ps(k, x + i)), 16);
        _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtepi32_epi16(r));
    }
}

/* Two rows at a time: their bf16 values of 16 columns become 16 pairs, one per column,
 * scattered down the transposed tile. */
static void pack_cols(cf_bf16 *dst, const float *x, long rows, long cols) {
    long ld_pairs = (rows + 1) / 2;
    __m512i down = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                      _mm512_set1_epi32((int)ld_pairs));
    for (long r = 0; r < rows; r += 2)
        for (long c = 0; c < cols; c += LANES) {
            __mmask16 k = first_lanes(cols - c);
            __m512i lo = _mm512_srli_epi32(round_high(_mm512_maskz_loadu_ps(k, x + r * cols + c)), 16);
            __m512i hi = _mm512_setzero_si512();
            if (r + 1 < rows)
                hi = _mm512_and_si512(round_high(_mm512_maskz_loadu_ps(k, x + (r + 1) * cols + c)),
                                      _mm512_set1_epi32((int)0xFFFF0000u));
            _mm512_mask_i32scatter_epi32(dst + 2 * (c * ld_pairs + r / 2), k, down, _mm512_or_si512(lo, hi), 4);
        }
}

const cf_fa_tiles cf_fa_tiles_avx512 = {.gemm = gemm,
                                        .pack_rows = pack_rows,
                                        .pack_cols = pack_cols,
                                        .rows = &cf_exp_rows_avx512};
