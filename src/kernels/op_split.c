/* split: cuts the last dimension into parts, equal (GPT-2's fused q/k/v projection) or of
 * given widths (Phi-3's q/k/v under grouped-query attention: q wider than k and v); its
 * backward is concat, which fills parts without a gradient with zeros. */
#include <string.h>

#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct split_job {
    const float *whole;
    float *whole_out;
    const float *parts_in[CF_MAX_OUTPUTS];
    float *parts_out[CF_MAX_OUTPUTS];
    long width[CF_MAX_OUTPUTS], offset[CF_MAX_OUTPUTS]; /* each part's columns and first column */
    long cols, n_parts;                                   /* of the whole */
} split_job;

/* The parts' widths: w[0 .. parts) when given (w[0] > 0), else cols / parts each; false when
 * they do not add up to cols. */
static bool part_widths(int64_t cols, int64_t parts, const int64_t *w, long *width, long *offset) {
    int64_t at = 0;
    for (int64_t k = 0; k < parts; k++) {
        width[k] = (long)(w[0] > 0 ? w[k] : cols / parts), offset[k] = (long)at;
        if (width[k] < 1) return false;
        at += width[k];
    }
    return at == cols;
}

/* split: input x [..., cols], attrs.i[0] = n, attrs.i[1 .. n] = widths (0: equal parts);
 * outputs n tensors [..., width] */
static int infer_split(cf_node *n, cf_error *err) {
    if (cf_require_dtype(n, 0, CF_F32, err)) return -1;
    const cf_tensor *x = n->inputs[0];
    int64_t parts = n->attrs.i[0];
    long width[CF_MAX_OUTPUTS], offset[CF_MAX_OUTPUTS];
    if (parts != n->n_outputs || x->ndim < 1 ||
        (n->attrs.i[1] == 0 && cf_tensor_cols(x) % parts != 0) ||
        !part_widths(cf_tensor_cols(x), parts, n->attrs.i + 1, width, offset))
        return cf_fail(err, "cannot split the last dimension of %s into %lld parts", x->name, (long long)parts);
    int64_t shape[CF_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    for (int k = 0; k < n->n_outputs; k++) {
        shape[x->ndim - 1] = width[k];
        cf_node_output(n, k, CF_F32, x->ndim, shape);
    }
    return 0;
}

static void split_rows(void *arg, long begin, long end) {
    split_job *j = arg;
    for (long r = begin; r < end; r++)
        for (long k = 0; k < j->n_parts; k++)
            memcpy(j->parts_out[k] + r * j->width[k], j->whole + r * j->cols + j->offset[k],
                   sizeof(float) * (size_t)j->width[k]);
}

static void split_forward(const cf_node *n) {
    split_job j = {.whole = cf_in(n, 0), .cols = (long)cf_tensor_cols(n->inputs[0]), .n_parts = n->n_outputs};
    part_widths(j.cols, j.n_parts, n->attrs.i + 1, j.width, j.offset);
    for (int k = 0; k < n->n_outputs; k++) j.parts_out[k] = cf_out(n, k);
    cf_parallel_rows((long)cf_tensor_rows(n->inputs[0]), j.cols, split_rows, &j);
}

static cf_tensor *concat(cf_graph *g, cf_tensor *const *parts, int n_parts, const int64_t *widths);

static void split_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    int64_t widths[CF_MAX_OUTPUTS];
    for (int k = 0; k < n->n_outputs; k++) widths[k] = cf_tensor_cols(n->outputs[k]);
    dx[0] = concat(g, dy, n->n_outputs, widths);
}

/* The op table needs one definition per part count (n_outputs is static). */
#define SPLIT_DEF(parts)                                                                                               \
    {.name = "split" #parts, .n_outputs = parts, .infer = infer_split, .kernels[CF_BACKEND_CPU] = split_forward,       \
     .backward = split_backward}
const cf_op_def cf_op_split[CF_MAX_OUTPUTS - 1] = {SPLIT_DEF(2), SPLIT_DEF(3), SPLIT_DEF(4)};

int cf_nn_split_widths(cf_graph *g, cf_tensor *x, int parts, const int64_t *widths, cf_tensor **out) {
    if (parts < 2 || parts > CF_MAX_OUTPUTS) {
        cf_graph_fail(g, "split: %d parts (2 to %d)", parts, CF_MAX_OUTPUTS);
        return -1;
    }
    cf_attrs attrs = {.i = {parts}};
    for (int k = 0; widths && k < parts; k++) attrs.i[1 + k] = widths[k];
    cf_node *node = cf_graph_node_add(g, &cf_op_split[parts - 2], (cf_tensor *[]){x}, 1, &attrs);
    if (!node) return -1;
    for (int k = 0; k < parts; k++) out[k] = node->outputs[k];
    return 0;
}

int cf_nn_split(cf_graph *g, cf_tensor *x, int parts, cf_tensor **out) {
    return cf_nn_split_widths(g, x, parts, NULL, out);
}

/* concat: inputs are the parts that have a gradient; attrs.i[0] = part count,
 * attrs.i[1] = bit mask of present parts, attrs.i[2 ..] = every part's width; output
 * like the split input. */
static int infer_concat(cf_node *n, cf_error *err) {
    (void)err;
    const cf_tensor *first = n->inputs[0];
    int64_t shape[CF_MAX_DIMS], cols = 0;
    memcpy(shape, first->shape, sizeof shape);
    for (int64_t k = 0; k < n->attrs.i[0]; k++) cols += n->attrs.i[2 + k];
    shape[first->ndim - 1] = cols;
    cf_node_output(n, 0, CF_F32, first->ndim, shape);
    return 0;
}

static void concat_rows(void *arg, long begin, long end) {
    split_job *j = arg;
    for (long r = begin; r < end; r++)
        for (long k = 0; k < j->n_parts; k++) {
            float *dst = j->whole_out + r * j->cols + j->offset[k];
            size_t bytes = sizeof(float) * (size_t)j->width[k];
            if (j->parts_in[k])
                memcpy(dst, j->parts_in[k] + r * j->width[k], bytes);
            else
                memset(dst, 0, bytes);
        }
}

static void concat_forward(const cf_node *n) {
    split_job j = {.whole_out = cf_out(n, 0), .cols = (long)cf_tensor_cols(n->outputs[0]),
                   .n_parts = (long)n->attrs.i[0]};
    part_widths(j.cols, j.n_parts, n->attrs.i + 2, j.width, j.offset);
    for (int k = 0, used = 0; k < j.n_parts; k++)
        j.parts_in[k] = n->attrs.i[1] >> k & 1 ? cf_in(n, used++) : NULL;
    cf_parallel_rows((long)cf_tensor_rows(n->outputs[0]), j.cols, concat_rows, &j);
}

const cf_op_def cf_op_concat = {.name = "concat", .n_outputs = 1, .infer = infer_concat,
                                .kernels[CF_BACKEND_CPU] = concat_forward};

static cf_tensor *concat(cf_graph *g, cf_tensor *const *parts, int n_parts, const int64_t *widths) {
    cf_tensor *present[CF_MAX_OUTPUTS];
    int n_present = 0;
    int64_t mask = 0;
    for (int k = 0; k < n_parts; k++)
        if (parts[k]) {
            present[n_present++] = parts[k];
            mask |= (int64_t)1 << k;
        }
    cf_attrs attrs = {.i = {n_parts, mask}};
    for (int k = 0; k < n_parts; k++) attrs.i[2 + k] = widths[k];
    return cf_op_apply(g, &cf_op_concat, present, n_present, &attrs);
}
