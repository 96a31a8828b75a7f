/* AVX2 packing of f32 strips and blocks (layout in gemm_pack.c): the loops of
 * gemm_pack_f32_simd.h with 8 x 8 register transposes. */
#include "gemm_avx2_inline.h"
#include "gemm_internal.h"

#include <immintrin.h>

/* r[i] = row i of an 8 x 8 block; on return r[k] holds column k. */
INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    /* Each 128-bit half now holds a 4 x 4 block: rows 0-3 and 4-7 swap halves. */
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* The vocabulary of gemm_pack_f32_simd.h for 8-lane vectors. */
enum { PACK_LANES = 8 };
typedef __m256 pack_vec;
typedef __m256i pack_mask;
INLINE pack_mask pack_lanes(long n) { return lanes8(n); }
INLINE pack_vec pack_load(pack_mask m, const float *p) { return _mm256_maskload_ps(p, m); }
INLINE void pack_store(float *p, pack_mask m, pack_vec v) { _mm256_maskstore_ps(p, m, v); }
INLINE pack_vec pack_zero(void) { return _mm256_setzero_ps(); }
INLINE void pack_transpose(pack_vec r[PACK_LANES]) { transpose8(r); }

#include "gemm_pack_f32_simd.h"

void cf_gemm_block_kmajor_f32_avx2(const float *src, long s_k, long lines, long K, int w, float *dst) {
    block_kmajor(src, s_k, lines, K, w, dst);
}

void cf_gemm_strip_f32_avx2(const float *src, long s_line, int h, long K, int w, float *dst) {
    strip_transpose(src, s_line, h, K, w, dst);
}
