#include <immintrin.h>

/* maddubs sums pairs into int16 (at most 2 * 128 * 127, no saturation), madd by ones the
 * pairs of those into int32. */
static inline __m256i block_dot_avx2(__m256i abs_w, __m256i signed_x) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_w, signed_x), _mm256_set1_epi16(1));
}
#define BLOCK_DOT block_dot_avx2
#define KERNEL_NAME matvec_q8_rows_avx2
#include "infer/matvec_q8_body.h"
