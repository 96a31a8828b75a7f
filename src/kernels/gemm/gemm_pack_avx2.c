/* AVX2 packing of f32 blocks (layout in gemm_pack.c), the AVX2 counterpart of
 * gemm_pack_avx512.c: strips of lines contiguous along k are transposed 8 x 8 in
 * registers; k-major blocks are copied 8 slots at a time, one source row per k. Missing
 * lines and the padding slots of a panel are written as zeros. */
#include "gemm_internal.h"

#include <immintrin.h>

#define INLINE static inline __attribute__((always_inline))

/* All-ones in the first n (clamped to 0..8) lanes, for vmaskmovps. */
INLINE __m256i lanes8(long n) {
    int c = n < 0 ? 0 : n > 8 ? 8 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

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

/* Lines contiguous along k: 8 lines x 8 k per step through the registers. */
static void strip_transpose(const float *src, long s_line, int h, long K, int w, float *dst) {
    for (int i0 = 0; i0 < w; i0 += 8) {
        __m256i out = lanes8(w - i0);
        for (long k0 = 0; k0 < K; k0 += 8) {
            __m256i kin = lanes8(K - k0);
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = i0 + i < h ? _mm256_maskload_ps(src + (i0 + i) * s_line + k0, kin) : _mm256_setzero_ps();
            transpose8(r);
            long kn = K - k0 < 8 ? K - k0 : 8;
            for (long k = 0; k < kn; k++) _mm256_maskstore_ps(dst + (k0 + k) * w + i0, out, r[k]);
        }
    }
}

bool cf_gemm_block_kmajor_f32_avx2(const float *src, long s_line, long s_k, long lines, long K, int w, float *dst) {
    if (s_line != 1) return false;
    long panels = (lines + w - 1) / w;
    for (long k = 0; k < K; k++) {
        const float *row = src + k * s_k;
        for (long p = 0; p < panels; p++) {
            long first = p * w;
            float *d = dst + (p * K + k) * w;
            for (int i0 = 0; i0 < w; i0 += 8)
                _mm256_maskstore_ps(d + i0, lanes8(w - i0), _mm256_maskload_ps(row + first + i0, lanes8(lines - first - i0)));
        }
    }
    return true;
}

bool cf_gemm_strip_f32_avx2(const float *src, long s_line, long s_k, int h, long K, int w, float *dst) {
    if (s_k != 1) return false; /* k-major sources go through the block routine */
    strip_transpose(src, s_line, h, K, w, dst);
    return true;
}
