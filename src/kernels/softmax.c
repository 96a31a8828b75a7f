/* Row softmax, max-subtracted for stability, with an optional causal limit per row. */
#include "kernels/kernels.h"

#include <math.h>

typedef struct softmax_job {
    float *x;
    long q_rows, dim, first_pos;
    bool causal;
} softmax_job;

static void softmax_row(float *x, long valid, long dim) {
    float max = x[0];
    for (long i = 1; i < valid; i++) max = x[i] > max ? x[i] : max;
    float sum = 0.0f;
    for (long i = 0; i < valid; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    float inv = 1.0f / sum;
    for (long i = 0; i < valid; i++) x[i] *= inv;
    for (long i = valid; i < dim; i++) x[i] = 0.0f;
}

static void softmax_rows(void *arg, long begin, long end) {
    const softmax_job *j = arg;
    for (long r = begin; r < end; r++) {
        long valid = j->dim;
        if (j->causal) {
            long limit = j->first_pos + r % j->q_rows + 1;
            valid = limit < j->dim ? limit : j->dim;
        }
        softmax_row(j->x + r * j->dim, valid, j->dim);
    }
}

void cf_softmax(float *x, long rows, long dim) {
    softmax_job job = {.x = x, .q_rows = rows, .dim = dim};
    cf_parallel_rows(rows, dim * 8, softmax_rows, &job);
}

void cf_softmax_causal(float *x, long groups, long q_rows, long dim, long first_pos) {
    softmax_job job = {.x = x, .q_rows = q_rows, .dim = dim, .first_pos = first_pos, .causal = true};
    cf_parallel_rows(groups * q_rows, dim * 8, softmax_rows, &job);
}
