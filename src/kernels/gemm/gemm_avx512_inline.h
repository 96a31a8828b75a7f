/* Helpers shared by the files compiled for AVX-512 (include only from those). */
#ifndef CFORMERS_GEMM_AVX512_INLINE_H
#define CFORMERS_GEMM_AVX512_INLINE_H

#include <immintrin.h>

#define GEMM_INLINE static inline __attribute__((always_inline))

/* The widest register tile, in vectors of 16 columns (the f32 small path's). */
enum { TILE_MAX_VECS = 4 };

/* The first n lanes (n clamped to 0..16). */
GEMM_INLINE __mmask16 lanes16(long n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

GEMM_INLINE __mmask32 lanes32(long n) {
    return n >= 32 ? (__mmask32)0xffffffffu : n <= 0 ? 0 : (__mmask32)((1u << n) - 1);
}

/* Decode's dot products stream B's rows from memory, a few rows side by side: fetching
 * each row's line this far ahead into L1 as the row is read beat fetching the next rows'
 * first lines, which arrived 32 KiB early and were evicted before use (1 thread, 8192 x
 * 2048 weights, 24-30 interleaved rounds: f32 M = 1 +19%, M = 4 +10%, M = 8 +5%, 2048 x
 * 768 +29%; 2 threads M = 1 +40%; bf16 M = 1 +6%, 2048 x 768 +24%, where nothing was
 * fetched ahead before). Four lines ahead gained less, twelve and sixteen less again. */
enum { DOT_PREFETCH_BYTES = 512 };

GEMM_INLINE void prefetch_row_ahead(const void *at) {
    _mm_prefetch((const char *)at + DOT_PREFETCH_BYTES, _MM_HINT_T0);
}

/* r[i] = row i of a 16 x 16 block; on return r[k] holds column k. */
GEMM_INLINE void transpose16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    /* Each 128-bit lane now holds a 4 x 4 block; gather the lanes. */
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* Writes alpha * acc (+ beta * C; C unread when beta == 0) to the m x n corner of a
 * tile of C, `vecs` (a constant after inlining) vectors of 16 columns wide, under masks. */
GEMM_INLINE void store_tile_rows(const int m, const int vecs, __m512 acc[][TILE_MAX_VECS], float *c, long ldc, int n,
                                 float alpha, float beta) {
    __mmask16 k[TILE_MAX_VECS] = {lanes16(n), lanes16(n - 16), lanes16(n - 32), lanes16(n - 48)};
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int v = 0; v < vecs; v++) {
            __m512 r = _mm512_mul_ps(va, acc[i][v]);
            if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k[v], ci + 16 * v), r);
            _mm512_mask_storeu_ps(ci + 16 * v, k[v], r);
        }
    }
}

/* As store_tile_rows, into a C stored transposed (tile element (i, j) at c[i + j*ldc]):
 * each vector goes through a register transpose into 16 rows of C of m values each. */
GEMM_INLINE void store_tile_cols(const int m, const int vecs, __m512 acc[][TILE_MAX_VECS], float *c, long ldc, int n,
                                 float alpha, float beta) {
    __mmask16 k = lanes16(m);
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (int v = 0; v < vecs; v++) {
        __m512 t[16];
        for (int i = 0; i < 16; i++) t[i] = i < m ? acc[i][v] : _mm512_setzero_ps();
        transpose16(t);
        for (int j = 0; j < 16 && 16 * v + j < n; j++) {
            float *cj = c + (16 * v + j) * ldc;
            __m512 r = _mm512_mul_ps(va, t[j]);
            if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(k, cj), r);
            _mm512_mask_storeu_ps(cj, k, r);
        }
    }
}

#endif
