/* Row softmax, max-subtracted for stability, with an optional attention mask per row
 * (kernels/attn_mask.h), on the row kernels of exp_rows.h. */
#include "kernels/kernels.h"

#include "kernels/attn_mask.h"
#include "kernels/context/context.h"

#include "kernels/exp_rows.h"

typedef struct softmax_job {
    float *x;
    long q_rows, dim, first_pos;
    const cf_attn_mask *mask; /* NULL: every column */
} softmax_job;

static void softmax_row(const cf_exp_rows *k, float *x, long valid, long dim) {
    float inv = 1.0f / k->exp_sum(x, valid, 1.0f, k->max(x, valid));
    for (long i = 0; i < valid; i++) x[i] *= inv;
    for (long i = valid; i < dim; i++) x[i] = 0.0f;
}

static void softmax_rows(void *arg, long begin, long end) {
    const softmax_job *j = arg;
    const cf_exp_rows *k = cf_kernels()->exp_rows;
    for (long r = begin; r < end; r++) {
        long valid = j->mask ? cf_mask_keys(j->mask, j->first_pos + r % j->q_rows, j->dim) : j->dim;
        softmax_row(k, j->x + r * j->dim, valid, j->dim);
    }
}

void cf_softmax(float *x, long rows, long dim) {
    softmax_job job = {.x = x, .q_rows = rows, .dim = dim};
    cf_parallel_rows(rows, dim * 8, softmax_rows, &job);
}

void cf_softmax_masked(float *x, long groups, long q_rows, long dim, long first_pos, const cf_attn_mask *mask) {
    softmax_job job = {.x = x, .q_rows = q_rows, .dim = dim, .first_pos = first_pos, .mask = mask};
    cf_parallel_rows(groups * q_rows, dim * 8, softmax_rows, &job);
}

void cf_softmax_causal(float *x, long groups, long q_rows, long dim, long first_pos) {
    cf_attn_mask causal = cf_mask_causal();
    cf_softmax_masked(x, groups, q_rows, dim, first_pos, &causal);
}
