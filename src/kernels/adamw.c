/* AdamW spans compiled for the baseline x86-64, the portable path (see adamw_span.h). */
#include "kernels/adamw_span.h"

void cf_adamw_span_generic(const cf_adamw_step *c, float decay, float *p, float *grad, float *m, float *v, long n) {
    adamw_span(c, decay, p, grad, m, v, n);
}
