/* AVX-512 packing (layout in gemm_pack.c): f32 strips and blocks through the loops of
 * gemm_pack_f32_simd.h with 16 x 16 register transposes; bf16 pairs and AMX chunks here. */
#include "gemm_avx512_inline.h"
#include "gemm_internal.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>


/* The vocabulary of gemm_pack_f32_simd.h for 16-lane vectors. */
enum { PACK_LANES = 16 };
typedef __m512 pack_vec;
typedef __mmask16 pack_mask;
GEMM_INLINE pack_mask pack_lanes(long n) { return lanes16(n); }
GEMM_INLINE pack_vec pack_load(pack_mask m, const float *p) { return _mm512_maskz_loadu_ps(m, p); }
GEMM_INLINE pack_vec pack_load_bf16(long n, const uint16_t *p) {
    __m256i h = _mm256_maskz_loadu_epi16(lanes16(n), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
GEMM_INLINE void pack_store(float *p, pack_mask m, pack_vec v) { _mm512_mask_storeu_ps(p, m, v); }
GEMM_INLINE pack_vec pack_zero(void) { return _mm512_setzero_ps(); }
GEMM_INLINE void pack_transpose(pack_vec r[PACK_LANES]) { transpose16(r); }

#include "gemm_pack_f32_simd.h"

void cf_gemm_block_kmajor_f32_avx512(const float *src, long s_k, long lines, long K, int w, float *dst) {
    block_kmajor(src, s_k, lines, K, w, dst);
}

void cf_gemm_strip_f32_avx512(const float *src, long s_line, int h, long K, int w, float *dst) {
    strip_transpose(src, s_line, h, K, w, dst);
}

void cf_gemm_block_kmajor_bf16_avx512(const uint16_t *src, long s_k, long lines, long K, int w, float *dst) {
    block_kmajor_bf16(src, s_k, lines, K, w, dst);
}

void cf_gemm_strip_bf16_avx512(const uint16_t *src, long s_line, int h, long K, int w, float *dst) {
    strip_transpose_bf16(src, s_line, h, K, w, dst);
}

/* bf16 pairs: (k, k+1) of a line that is contiguous along k are one 32-bit word, so
 * they move through the 32-bit transpose; k-major lines are zero-extended and the
 * odd row shifted into the high half. */
bool cf_gemm_strip_pairs_avx512(const uint16_t *src, long s_line, long s_k, int h, long K, long pairs, int w,
                                uint16_t *dst) {
    uint32_t *d = (uint32_t *)dst;
    long whole = K / 2, used = (K + 1) / 2;
    if (s_k == 1 && s_line % 2 == 0) {
        strip_transpose((const float *)src, s_line / 2, h, whole, w, (float *)d);
        if (K % 2)
            for (int i = 0; i < w; i++) d[whole * w + i] = i < h ? src[i * s_line + K - 1] : 0;
    } else if (s_line == 1) {
        for (long q = 0; q < used; q++) {
            const uint16_t *even = src + 2 * q * s_k, *odd = 2 * q + 1 < K ? even + s_k : NULL;
            for (int i0 = 0; i0 < w; i0 += 16) {
                __mmask16 in = lanes16(h - i0);
                __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in, even + i0));
                __m512i hi = odd ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in, odd + i0)) : _mm512_setzero_si512();
                _mm512_mask_storeu_epi32(d + q * w + i0, lanes16(w - i0), _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
            }
        }
    } else {
        return false;
    }
    memset(d + used * w, 0, sizeof(uint32_t) * (size_t)((pairs - used) * w));
    return true;
}

/* Line i's k pairs (2q, 2q+1) for q < 16, from a k-major source: row 2q zero-extended,
 * row 2q+1 in the high half; pairs at or past K are zero. r[q] covers lines i0..i0+15. */
GEMM_INLINE void kmajor_pairs16(const uint16_t *src, long s_k, int h, long K, long k0, int i0, __m512i r[16]) {
    __mmask16 in = lanes16(h - i0);
    for (int q = 0; q < 16; q++) {
        long k = k0 + 2 * q;
        __m512i lo = k < K ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in, src + k * s_k + i0)) : _mm512_setzero_si512();
        __m512i hi = k + 1 < K ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(in, src + (k + 1) * s_k + i0))
                               : _mm512_setzero_si512();
        r[q] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
    }
}

void cf_gemm_chunks32_bf16_avx512(const uint16_t *src, long s_line, long s_k, int h, long K, int w, uint16_t *dst) {
    for (long k0 = 0; k0 < K; k0 += 32, dst += (long)w * 32) {
        if (s_k == 1) { /* lines contiguous along k: one masked 64-byte copy per line */
            for (int i = 0; i < w; i++)
                _mm512_storeu_si512(dst + i * 32, i < h ? _mm512_maskz_loadu_epi16(lanes32(K - k0), src + i * s_line + k0)
                                                         : _mm512_setzero_si512());
            continue;
        }
        /* k-major: 16 pairs x 16 lines through the 32-bit transpose give 16 lines of 32 k. */
        for (int i0 = 0; i0 < w; i0 += 16) {
            __m512i r[16];
            __m512 f[16];
            kmajor_pairs16(src, s_k, h, K, k0, i0, r);
            for (int q = 0; q < 16; q++) f[q] = _mm512_castsi512_ps(r[q]);
            transpose16(f);
            for (int i = 0; i < 16 && i0 + i < w; i++) _mm512_storeu_ps(dst + (i0 + i) * 32, f[i]);
        }
    }
}

/* The vocabulary of gemm_pack_decode_simd.h: 16 quants widened to int32. */
GEMM_INLINE pack_vec pack_quants(const uint8_t *p, int kind, int shift, cf_f16 d) {
    __m128i bytes = _mm_loadu_si128((const __m128i *)p);
    __m512i v;
    if (kind == GEMM_QUANTS_S8) v = _mm512_cvtepi8_epi32(bytes);
    else v = _mm512_cvtepu8_epi32(bytes);
    if (kind == GEMM_QUANTS_U8) v = _mm512_sub_epi32(v, _mm512_set1_epi32(128));
    if (kind == GEMM_QUANTS_NIBBLE)
        v = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(v, (unsigned)shift), _mm512_set1_epi32(15)),
                             _mm512_set1_epi32(8));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_cvtph_ps(_mm256_set1_epi16((short)d)));
}

#include "gemm_pack_decode_simd.h"

bool cf_gemm_decode_strip_avx512(const gemm_operand *src, long r0, long first, int h, long rows, int nr, float *dst) {
    return decode_strip_simd(src, r0, first, h, rows, nr, dst);
}
