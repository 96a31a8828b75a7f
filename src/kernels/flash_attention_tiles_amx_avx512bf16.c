/* The flash-attention bf16 tile product on AMX: 32 x 32 blocks of C in four 16 x 16 f32
 * tile registers, fed per 32 k values by two A tiles (16 rows x 32 bf16, read in place
 * from A's rows) and two B tiles (16 pairs x 16 columns, read in place from the packed
 * pairs): TDPBF16PS does 16 x 16 x 32 multiply-adds, several times vdpbf16ps's rate.
 * C is loaded into the tiles and stored back directly (tiles take any row stride), so
 * nothing is packed. Shapes that are not whole tiles go to the vdpbf16ps product.
 *
 * The tile configuration is per thread: the driver brackets each slot's work with
 * cf_fa_amx_enter / cf_fa_amx_leave. The configuration (all eight tiles 16 rows x 64
 * bytes: C 0-3, A 4-5, B 6-7) and the OS grant are the GEMM's. */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/flash_attention.h"
#include "kernels/gemm/gemm_internal.h"

#define AMX __attribute__((target("amx-tile,amx-bf16")))

bool cf_fa_amx_usable(void) { return cf_gemm_amx_usable(); }

void cf_fa_amx_enter(void) { cf_gemm_amx_enter(); }

void cf_fa_amx_leave(void) { cf_gemm_amx_leave(); }

/* C[i0.., j0..] block of up to 32 x 32 (lower: rows 16..31 exist; right: columns). */
AMX static void block(long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C, long ldc,
                      bool accumulate, bool lower, bool right) {
    long a_stride = lda * (long)sizeof(cf_bf16), b_stride = ldb * (long)sizeof(uint32_t);
    long c_stride = ldc * (long)sizeof(float);
    if (accumulate) {
        _tile_loadd(0, C, c_stride);
        if (right) _tile_loadd(1, C + 16, c_stride);
        if (lower) _tile_loadd(2, C + 16 * ldc, c_stride);
        if (lower && right) _tile_loadd(3, C + 16 * ldc + 16, c_stride);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (long k = 0; k < K; k += 32) {
        const uint32_t *b = B + k / 2 * ldb;
        _tile_loadd(4, A + k, a_stride);
        _tile_loadd(6, b, b_stride);
        _tile_dpbf16ps(0, 4, 6);
        if (right) {
            _tile_loadd(7, b + 16, b_stride);
            _tile_dpbf16ps(1, 4, 7);
        }
        if (lower) {
            _tile_loadd(5, A + 16 * lda + k, a_stride);
            _tile_dpbf16ps(2, 5, 6);
            if (right) _tile_dpbf16ps(3, 5, 7);
        }
    }
    _tile_stored(0, C, c_stride);
    if (right) _tile_stored(1, C + 16, c_stride);
    if (lower) _tile_stored(2, C + 16 * ldc, c_stride);
    if (lower && right) _tile_stored(3, C + 16 * ldc + 16, c_stride);
}

void cf_fa_gemm_bf16_amx(long M, long N, long K, const cf_bf16 *A, long lda, const uint32_t *B, long ldb, float *C,
                         long ldc, bool accumulate) {
    if (M % 16 || N % 16 || K % 32) {
        cf_fa_gemm_bf16_avx512bf16(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
        return;
    }
    for (long i = 0; i < M; i += 32)
        for (long j = 0; j < N; j += 32)
            block(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc, accumulate, i + 16 < M, j + 16 < N);
}
