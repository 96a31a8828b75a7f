/* AdamW spans compiled for AVX2 + FMA (see adamw_span.h). */
#include "kernels/adamw_span.h"

void cf_adamw_span_avx2(const cf_adamw_step *c, float decay, float *p, float *grad, float *m, float *v, long n) {
    adamw_span(c, decay, p, grad, m, v, n);
}
