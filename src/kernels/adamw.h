/* Internal: the AdamW update kernel of the `adamw` op (op_optim.c), one build per ISA. */
#ifndef CFORMERS_ADAMW_H
#define CFORMERS_ADAMW_H

/* Per-step constants: the moments' decay rates, the gradient clip factor, the step size
 * lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t) and epsilon. */
typedef struct cf_adamw_step {
    float beta1, beta2, clip, step_size, inv_sqrt_bc2, eps;
} cf_adamw_step;

/* Updates n elements: moments m, v from the gradient, then p (times `decay`, the
 * decoupled weight decay 1 - lr * wd, or 1); zeroes the gradient. */
typedef void (*cf_adamw_span_fn)(const cf_adamw_step *c, float decay, float *p, float *grad, float *m, float *v,
                                 long n);
void cf_adamw_span_generic(const cf_adamw_step *c, float decay, float *p, float *grad, float *m, float *v, long n);
void cf_adamw_span_avx2(const cf_adamw_step *c, float decay, float *p, float *grad, float *m, float *v, long n);
void cf_adamw_span_avx512(const cf_adamw_step *c, float decay, float *p, float *grad, float *m, float *v, long n);

#endif
