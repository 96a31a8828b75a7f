/* Element-wise MLP activations, split into blocks over the pool. */
#include "kernels/kernels.h"

#include <math.h>

enum { BLOCK = 4096 };

typedef struct act_job {
    const float *a, *b;
    float *out;
    long n;
} act_job;

static void swiglu_blocks(void *arg, long begin, long end) {
    const act_job *j = arg;
    long lo = begin * BLOCK, hi = end * BLOCK < j->n ? end * BLOCK : j->n;
    for (long i = lo; i < hi; i++) {
        float g = j->a[i];
        j->out[i] = g / (1.0f + expf(-g)) * j->b[i];
    }
}

void cf_swiglu(const float *gate, const float *up, float *out, long n) {
    act_job job = {.a = gate, .b = up, .out = out, .n = n};
    cf_parallel_rows((n + BLOCK - 1) / BLOCK, BLOCK * 8, swiglu_blocks, &job);
}

static void gelu_blocks(void *arg, long begin, long end) {
    const act_job *j = arg;
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    long lo = begin * BLOCK, hi = end * BLOCK < j->n ? end * BLOCK : j->n;
    for (long i = lo; i < hi; i++) {
        float x = j->a[i];
        j->out[i] = 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
    }
}

void cf_gelu_tanh(const float *x, float *y, long n) {
    act_job job = {.a = x, .out = y, .n = n};
    cf_parallel_rows((n + BLOCK - 1) / BLOCK, BLOCK * 8, gelu_blocks, &job);
}
