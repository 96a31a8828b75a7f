/* embedding: rows of a [V, D] table gathered at i32 ids; its backward scatter-adds the
 * output gradient into a [V, D] table gradient. */
#include <string.h>

#include "cformers/threads.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

typedef struct gather_job {
    const cf_tensor *ids_tensor;
    const int32_t *ids;
    const float *src;
    float *dst;
    long vocab, dim, n_ids;
    bool accumulate; /* backward: add into dst instead of overwriting it */
} gather_job;

/* The id of row r, or -1 (reported: the run stops after this node) when it is outside
 * the table. */
static long checked_id(const gather_job *j, long r) {
    int32_t id = j->ids[r];
    if (id < 0 || id >= j->vocab) {
        cf_kernel_fail("token id %d at row %ld of %s is outside the vocabulary of %ld", id, r, j->ids_tensor->name,
                       j->vocab);
        return -1;
    }
    return id;
}

static int infer_embedding(cf_node *n, cf_error *err) {
    if (cf_require_dtype(n, 0, CF_F32, err) || cf_require_dtype(n, 1, CF_I32, err)) return -1;
    const cf_tensor *w = n->inputs[0], *ids = n->inputs[1];
    if (w->ndim != 2 || ids->ndim >= CF_MAX_DIMS)
        return cf_fail(err, "table %s must be 2-D and ids %s at most %d-D", w->name, ids->name, CF_MAX_DIMS - 1);
    int64_t shape[CF_MAX_DIMS];
    for (int i = 0; i < ids->ndim; i++) shape[i] = ids->shape[i];
    shape[ids->ndim] = w->shape[1];
    cf_node_output(n, 0, CF_F32, ids->ndim + 1, shape);
    return 0;
}

static void gather_rows(void *arg, long begin, long end) {
    gather_job *j = arg;
    for (long r = begin; r < end; r++) {
        long id = checked_id(j, r);
        if (id >= 0) memcpy(j->dst + r * j->dim, j->src + id * j->dim, sizeof(float) * (size_t)j->dim);
        else memset(j->dst + r * j->dim, 0, sizeof(float) * (size_t)j->dim);
    }
}

static void embedding_forward(const cf_node *n) {
    const cf_tensor *w = n->inputs[0], *ids = n->inputs[1];
    gather_job j = {.ids_tensor = ids, .ids = cf_tensor_i32(ids), .src = cf_in(n, 0), .dst = cf_out(n, 0),
                    .vocab = (long)w->shape[0], .dim = (long)w->shape[1], .n_ids = (long)cf_tensor_numel(ids)};
    cf_parallel_rows(j.n_ids, j.dim, gather_rows, &j);
}

static void embedding_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_attrs attrs = {.i = {n->inputs[0]->shape[0]}};
    dx[0] = cf_op_apply(g, &cf_op_embedding_backward, (cf_tensor *[]){dy[0], n->inputs[1]}, 2, &attrs);
}

const cf_op_def cf_op_embedding = {.name = "embedding", .n_outputs = 1, .infer = infer_embedding,
                                   .kernels[CF_BACKEND_CPU] = embedding_forward, .backward = embedding_backward};

cf_tensor *cf_nn_embedding(cf_graph *g, cf_tensor *weight, cf_tensor *ids) {
    return cf_op_apply(g, &cf_op_embedding, (cf_tensor *[]){weight, ids}, 2, NULL);
}

/* ---- backward: inputs (dy [ids..., D], ids), attrs.i[0] = V ---- */

static int infer_embedding_backward(cf_node *n, cf_error *err) {
    int64_t shape[2] = {n->attrs.i[0], cf_tensor_cols(n->inputs[0])};
    cf_node_output(n, 0, CF_F32, 2, shape);
    return 0;
}

/* Each task owns a range of columns of the whole table, so tokens never race and
 * every element is summed in token order (deterministic). */
static void scatter_columns(void *arg, long begin, long end) {
    gather_job *j = arg;
    size_t width = sizeof(float) * (size_t)(end - begin);
    if (!j->accumulate)
        for (long v = 0; v < j->vocab; v++) memset(j->dst + v * j->dim + begin, 0, width);
    for (long r = 0; r < j->n_ids; r++) {
        long id = checked_id(j, r);
        if (id < 0) continue;
        const float *src = j->src + r * j->dim;
        float *dst = j->dst + id * j->dim;
        for (long c = begin; c < end; c++) dst[c] += src[c];
    }
}

static void embedding_backward_forward(const cf_node *n) {
    const cf_tensor *ids = n->inputs[1];
    gather_job j = {.ids_tensor = ids, .ids = cf_tensor_i32(ids), .src = cf_in(n, 0), .dst = cf_out(n, 0),
                    .vocab = (long)n->attrs.i[0], .dim = (long)cf_tensor_cols(n->inputs[0]),
                    .n_ids = (long)cf_tensor_numel(ids), .accumulate = n->accumulate & 1u};
    cf_parallel_rows(j.dim, j.n_ids + j.vocab, scatter_columns, &j);
}

const cf_op_def cf_op_embedding_backward = {.name = "embedding_backward", .n_outputs = 1,
                                            .infer = infer_embedding_backward,
                                            .kernels[CF_BACKEND_CPU] = embedding_backward_forward,
                                            .accumulate_outputs = 1u};
