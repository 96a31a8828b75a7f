/* Element-wise MLP activations, split into blocks over the pool. */
#include "kernels/kernels.h"

#include <math.h>

#include "kernels/context/context.h"
#include "kernels/exp_rows.h"

enum { BLOCK = 4096 };

typedef struct act_job {
    const float *a, *b;
    float *out;
    long n;
} act_job;

/* The sigmoids go through a stack buffer: out may alias gate. */
static void swiglu_blocks(void *arg, long begin, long end) {
    const act_job *j = arg;
    const cf_exp_rows *k = cf_kernels()->exp_rows;
    float s[CF_SIGMOID_CHUNK];
    long lo = begin * BLOCK, hi = end * BLOCK < j->n ? end * BLOCK : j->n;
    for (long c = lo; c < hi; c += CF_SIGMOID_CHUNK) {
        long m = hi - c < CF_SIGMOID_CHUNK ? hi - c : CF_SIGMOID_CHUNK;
        k->sigmoid(j->a + c, s, m);
        for (long i = 0; i < m; i++) j->out[c + i] = j->a[c + i] * s[i] * j->b[c + i];
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
