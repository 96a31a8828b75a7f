/* Row softmax, max-subtracted for stability, with an optional attention mask per row
 * (kernels/attn_mask.h), on the row kernels of exp_rows.h. */
#include "kernels/kernels.h"

#include "kernels/attn_mask.h"
#include "kernels/context/context.h"

#include "kernels/exp_rows.h"

typedef struct softmax_job {
    float *x;
    long q_rows, dim, first_pos;
    long key0;                /* the key position of column 0 */
    const cf_attn_mask *mask; /* NULL: every column */
} softmax_job;

static void softmax_row(const cf_exp_rows *k, float *x, long valid, long dim) {
    float inv = 1.0f / k->exp_sum(x, valid, 1.0f, k->max(x, valid));
    for (long i = 0; i < valid; i++) x[i] *= inv;
    for (long i = valid; i < dim; i++) x[i] = 0.0f;
}

/* A row under a window or a soft-cap: columns [first, valid) soft-capped and softmaxed,
 * the rest 0. (The plain causal rows keep softmax_row, bit for bit.) */
static void softmax_row_windowed(const cf_exp_rows *k, const cf_attn_mask *mask, float *x, long first, long valid,
                                 long dim) {
    if (first >= valid) { /* no key (a query past a chunk's keys) */
        for (long i = 0; i < dim; i++) x[i] = 0.0f;
        return;
    }
    for (long i = 0; i < first; i++) x[i] = 0.0f;
    cf_mask_softcap(mask, x + first, valid - first);
    softmax_row(k, x + first, valid - first, dim - first);
}

static void softmax_rows(void *arg, long begin, long end) {
    const softmax_job *j = arg;
    const cf_exp_rows *k = cf_kernels()->exp_rows;
    bool plain = !j->mask || (j->mask->window == 0 && j->mask->softcap == 0 && j->key0 == 0);
    for (long r = begin; r < end; r++) {
        long q_pos = j->first_pos + r % j->q_rows;
        if (plain) {
            long valid = j->mask ? cf_mask_keys(j->mask, q_pos, j->dim) : j->dim;
            softmax_row(k, j->x + r * j->dim, valid, j->dim);
            continue;
        }
        /* columns are keys key0 .. key0 + dim - 1 */
        long first = cf_mask_first_key(j->mask, q_pos) - j->key0;
        long valid = cf_mask_keys(j->mask, q_pos, j->key0 + j->dim) - j->key0;
        softmax_row_windowed(k, j->mask, j->x + r * j->dim, first > 0 ? first : 0, valid, j->dim);
    }
}

void cf_softmax(float *x, long rows, long dim) {
    softmax_job job = {.x = x, .q_rows = rows, .dim = dim};
    cf_parallel_rows(rows, dim * 8, softmax_rows, &job);
}

void cf_softmax_masked_from(float *x, long groups, long q_rows, long dim, long first_pos, long key0,
                            const cf_attn_mask *mask) {
    softmax_job job = {.x = x, .q_rows = q_rows, .dim = dim, .first_pos = first_pos, .key0 = key0, .mask = mask};
    cf_parallel_rows(groups * q_rows, dim * 8, softmax_rows, &job);
}

void cf_softmax_masked(float *x, long groups, long q_rows, long dim, long first_pos, const cf_attn_mask *mask) {
    cf_softmax_masked_from(x, groups, q_rows, dim, first_pos, 0, mask);
}

void cf_softmax_causal(float *x, long groups, long q_rows, long dim, long first_pos) {
    cf_attn_mask causal = cf_mask_causal();
    cf_softmax_masked(x, groups, q_rows, dim, first_pos, &causal);
}
