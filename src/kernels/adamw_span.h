/* The AdamW update of one span of the parameter block, in plain C for the compiler to
 * vectorise with whatever the including file is compiled for (adamw.c: baseline x86-64,
 * adamw_avx2.c, adamw_avx512.c; -fno-math-errno lets sqrtf become a vector square root).
 * Elements are independent and sqrt and division are IEEE-exact, so the paths agree
 * except where a compiler contracts a multiply and an add into one rounding. */
#ifndef CFORMERS_ADAMW_SPAN_H
#define CFORMERS_ADAMW_SPAN_H

#include <math.h>

#include "kernels/adamw.h"

/* m, v: the moments after this gradient (clipped); p = p * decay - step_size * m /
 * (sqrt(v) / sqrt(bc2) + eps), as torch.optim.AdamW; the gradient is zeroed for the
 * next accumulation. */
static inline void adamw_span(const cf_adamw_step *c, float decay, float *restrict p, float *restrict grad,
                              float *restrict m, float *restrict v, long n) {
    const float b1 = c->beta1, b2 = c->beta2, one_b1 = 1.0f - c->beta1, one_b2 = 1.0f - c->beta2;
    const float clip = c->clip, step_size = c->step_size, inv_sqrt_bc2 = c->inv_sqrt_bc2, eps = c->eps;
    for (long i = 0; i < n; i++) {
        float g = grad[i] * clip;
        float mi = b1 * m[i] + one_b1 * g, vi = b2 * v[i] + one_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
        grad[i] = 0.0f;
    }
}

#endif
