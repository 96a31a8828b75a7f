/* q8_0 decode kernel for AVX2 (matvec.h's repacked layout). Without VNNI the sign trick
 * does the int8 products: |w| (unsigned) times x with w's sign, so maddubs (unsigned by
 * signed, summed in pairs into int16: at most 2 * 128 * 127, no saturation) and madd by
 * ones give each block's sums in 8 int32 lanes; x is never -128 (matvec_quantize_x rounds
 * within +-127). Rows come in groups of MATVEC_ROWS sharing each load of x. */
#include <immintrin.h>

#include "infer/matvec.h"
#include "infer/matvec_hsum.h"

void matvec_q8_rows_avx2(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    enum { ROWS = MATVEC_ROWS };
    const matvec_q8 *m = w;
    long nb = m->blocks, row_bytes = nb * CF_Q8_0_BLOCK, dist = matvec_ahead_rows(nb * CF_Q8_0_BLOCK_BYTES);
    const int8_t *q = xq;
    const float *dx = matvec_x_scales(xq, in);
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    for (long r = r0; r < r1; r += ROWS) {
        const uint8_t *row[ROWS], *ahead[ROWS];
        MATVEC_GROUP_ROWS(row, ahead, m->q, r, r1, row_bytes, dist)
        const cf_f16 *d[ROWS];
        __m256 acc[ROWS];
        for (int k = 0; k < ROWS; k++) {
            d[k] = m->d + (row[k] - m->q) / CF_Q8_0_BLOCK;
            acc[k] = _mm256_setzero_ps();
        }
        for (long b = 0; b < nb; b++) {
            __m256i x = _mm256_loadu_si256((const __m256i *)(q + b * CF_Q8_0_BLOCK));
            for (int k = 0; k < ROWS; k++) {
                _mm_prefetch((const char *)(ahead[k] + b * CF_Q8_0_BLOCK), _MM_HINT_T1);
                __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(row[k] + b * CF_Q8_0_BLOCK)), flip);
                __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(x, v)), ones);
                __m256 scale = _mm256_set1_ps(_cvtsh_ss(d[k][b]) * dx[b]);
                acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale, acc[k]);
            }
        }
        for (int k = 0; k < ROWS && r + k < r1; k++) y[r + k] = matvec_hsum256(acc[k]);
    }
}
