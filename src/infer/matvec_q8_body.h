/* The q8_0 decode kernel's body, shared by the AVX2 and AVX-512 VNNI files, which differ
 * only in BLOCK_DOT: the 32 int8 products of one block summed into 8 int32 lanes. Both use
 * the sign trick: |w| (unsigned) times x with w's sign, so one unsigned-by-signed multiply
 * (maddubs / vpdpbusd) does it; x is never -128 (matvec_quantize_x rounds within +-127),
 * and |w| of a stored -128 reads 128 as unsigned, which is still right.
 *
 * Rows come in groups of MATVEC_ROWS sharing each load of x (matvec.h); the software
 * prefetch reads the same block of the next group. Rows and x are zero-padded to whole
 * blocks, so there are no tail columns. Needs <immintrin.h>, BLOCK_DOT and KERNEL_NAME. */
#include "infer/matvec.h"
#include "infer/matvec_hsum.h"

void KERNEL_NAME(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    enum { ROWS = MATVEC_ROWS };
    long blocks = (in + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    const int8_t *q = xq;
    const float *d = matvec_x_scales(xq, in);
    const cf_block_q8_0 *base = w;
    long dist = matvec_ahead_rows(blocks * CF_Q8_0_BLOCK_BYTES);
    for (long r = r0; r < r1; r += ROWS) {
        const cf_block_q8_0 *row[ROWS], *ahead[ROWS];
        MATVEC_GROUP_ROWS(row, ahead, base, r, r1, blocks, dist)
        __m256 acc[ROWS];
        for (int k = 0; k < ROWS; k++) acc[k] = _mm256_setzero_ps();
        for (long b = 0; b < blocks; b++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(q + b * CF_Q8_0_BLOCK));
            float dx = d[b];
            for (int k = 0; k < ROWS; k++) {
                _mm_prefetch((const char *)(ahead[k] + b), _MM_HINT_T0);
                __m256i v = _mm256_loadu_si256((const __m256i *)row[k][b].q);
                __m256i dot = BLOCK_DOT(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v));
                __m256 scale = _mm256_set1_ps(_cvtsh_ss(row[k][b].d) * dx);
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[k]);
            }
        }
        for (int k = 0; k < ROWS && r + k < r1; k++) y[r + k] = matvec_hsum256(acc[k]);
    }
}
