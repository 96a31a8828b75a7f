#include <immintrin.h>

/* vpdpbusd: four unsigned-by-signed byte products summed into each int32 lane at once. */
static inline __m256i block_dot_vnni(__m256i abs_w, __m256i signed_x) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), abs_w, signed_x);
}
#define BLOCK_DOT block_dot_vnni
#define KERNEL_NAME matvec_q8_rows_avx512vnni
#include "infer/matvec_q8_body.h"
