/* AVX2 packing of f32 strips and blocks (layout in gemm_pack.c): the loops of
 * gemm_pack_f32_simd.h with 8 x 8 register transposes. */
#include "gemm_avx2_inline.h"
#include "gemm_internal.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The vocabulary of gemm_pack_f32_simd.h for 8-lane vectors. */
enum { PACK_LANES = 8 };
typedef __m256 pack_vec;
typedef __m256i pack_mask;
INLINE pack_mask pack_lanes(long n) { return lanes8(n); }
INLINE pack_vec pack_load(pack_mask m, const float *p) { return _mm256_maskload_ps(p, m); }
INLINE pack_vec pack_load_bf16(long n, const uint16_t *p) { /* no 16-bit masked load: a short vector is copied */
    __m128i h;
    if (n >= PACK_LANES) {
        h = _mm_loadu_si128((const __m128i *)p);
    } else {
        uint16_t part[PACK_LANES] = {0};
        if (n > 0) memcpy(part, p, sizeof(uint16_t) * (size_t)n);
        h = _mm_loadu_si128((const __m128i *)part);
    }
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
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

void cf_gemm_block_kmajor_bf16_avx2(const uint16_t *src, long s_k, long lines, long K, int w, float *dst) {
    block_kmajor_bf16(src, s_k, lines, K, w, dst);
}

void cf_gemm_strip_bf16_avx2(const uint16_t *src, long s_line, int h, long K, int w, float *dst) {
    strip_transpose_bf16(src, s_line, h, K, w, dst);
}

/* The vocabulary of gemm_pack_decode_simd.h: 8 quants widened to int32 (F16C for the scale). */
INLINE pack_vec pack_quants(const uint8_t *p, int kind, int shift, cf_f16 d) {
    __m128i bytes = _mm_loadl_epi64((const __m128i *)p);
    __m256i v;
    if (kind == GEMM_QUANTS_S8) v = _mm256_cvtepi8_epi32(bytes);
    else v = _mm256_cvtepu8_epi32(bytes);
    if (kind == GEMM_QUANTS_U8) v = _mm256_sub_epi32(v, _mm256_set1_epi32(128));
    if (kind == GEMM_QUANTS_NIBBLE)
        v = _mm256_sub_epi32(_mm256_and_si256(_mm256_srli_epi32(v, shift), _mm256_set1_epi32(15)), _mm256_set1_epi32(8));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_cvtph_ps(_mm_set1_epi16((short)d)));
}

#include "gemm_pack_decode_simd.h"

bool cf_gemm_decode_strip_avx2(const gemm_operand *src, long r0, long first, int h, long rows, int nr, float *dst) {
    return decode_strip_simd(src, r0, first, h, rows, nr, dst);
}
