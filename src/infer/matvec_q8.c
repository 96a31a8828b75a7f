/* q8_0 decode products: the activation quantizer and the portable kernel (matvec.h). */
#include <math.h>

#include "infer/matvec.h"

void matvec_quantize_x(const float *x, long in, void *scratch) {
    long blocks = (in + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    int8_t *q = scratch;
    float *d = (float *)(q + blocks * CF_Q8_0_BLOCK);
    for (long b = 0; b < blocks; b++) {
        const float *xb = x + b * CF_Q8_0_BLOCK;
        int n = in - b * CF_Q8_0_BLOCK < CF_Q8_0_BLOCK ? (int)(in - b * CF_Q8_0_BLOCK) : CF_Q8_0_BLOCK;
        float amax = 0.0f;
        for (int i = 0; i < n; i++) amax = fabsf(xb[i]) > amax ? fabsf(xb[i]) : amax;
        float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
        d[b] = scale;
        for (int i = 0; i < CF_Q8_0_BLOCK; i++) q[b * CF_Q8_0_BLOCK + i] = i < n ? (int8_t)lrintf(xb[i] * inv) : 0;
    }
}

void matvec_q8_rows_scalar(const void *w, const void *xq, float *y, long r0, long r1, long in) {
    long blocks = (in + CF_Q8_0_BLOCK - 1) / CF_Q8_0_BLOCK;
    const int8_t *q = xq;
    const float *d = matvec_x_scales(xq, in);
    for (long r = r0; r < r1; r++) {
        const cf_block_q8_0 *row = (const cf_block_q8_0 *)w + r * blocks;
        float s = 0.0f;
        for (long b = 0; b < blocks; b++) {
            int32_t dot = 0;
            for (int i = 0; i < CF_Q8_0_BLOCK; i++) dot += (int32_t)row[b].q[i] * q[b * CF_Q8_0_BLOCK + i];
            s += cf_f16_to_f32(row[b].d) * d[b] * (float)dot;
        }
        y[r] = s;
    }
}
