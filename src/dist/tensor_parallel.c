/* Tensor parallelism's graph ops: tp_copy, tp_reduce and tp_grad_norm (tensor_parallel.h). */
#include "dist/tensor_parallel.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/threads.h"
#include "core/graph_internal.h"
#include "core/graph_rewrite.h"
#include "dist/dist_internal.h"
#include "kernels/graph_ops.h"

static bool alone(const cf_dist_group *group) { return !group || group->size < 2 || group->comm == MPI_COMM_NULL; }

/* x summed over the group in place, in pieces MPI's int counts can hold. */
static int group_sum_f32(const cf_dist_group *group, float *x, int64_t count, cf_error *err) {
    for (int64_t at = 0; at < count;) {
        int piece = count - at > INT_MAX / 2 ? INT_MAX / 2 : (int)(count - at);
        if (cf_dist_check(MPI_Allreduce(MPI_IN_PLACE, x + at, piece, MPI_FLOAT, MPI_SUM, group->comm), "MPI_Allreduce",
                          err) != 0)
            return -1;
        at += piece;
    }
    return 0;
}

int cf_tp_sum_f32(const cf_dist_group *group, float *x, int64_t count, cf_error *err) {
    return alone(group) ? 0 : group_sum_f32(group, x, count, err);
}

/* The kernels' sum: a failure is the kernel's error. */
static void sum_over_group(const cf_node *n, const cf_dist_group *group, float *x, int64_t count) {
    cf_error err = {{0}};
    if (group_sum_f32(group, x, count, &err) != 0)
        cf_kernel_fail("tensor group all-reduce of %s (%lld values): %s", n->outputs[0]->name, (long long)count, err.msg);
}

static int infer_like(cf_node *n, cf_error *err) {
    if (cf_require_dtype(n, 0, CF_F32, err)) return -1;
    cf_node_output_like(n, 0, n->inputs[0]);
    return 0;
}

/* Both ops' forward: the output is the input (in place when the planner grants it),
 * summed over the group in attrs.p when attrs.i[0] says so. */
static void tp_forward(const cf_node *n) {
    float *y = cf_out(n, 0);
    int64_t count = cf_tensor_numel(n->inputs[0]);
    if (y != cf_in(n, 0)) cf_ops_copy(y, cf_in(n, 0), (long)count);
    if (n->attrs.i[0] && !alone(n->attrs.p)) sum_over_group(n, n->attrs.p, y, count);
}

static void copy_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    dx[0] = cf_tp_reduce(g, dy[0], n->attrs.p);
}

static void reduce_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    (void)g, (void)n;
    dx[0] = dy[0];
}

static const cf_op_def op_tp_copy = {.name = "tp_copy", .n_outputs = 1, .infer = infer_like,
                                     .kernels[CF_BACKEND_CPU] = tp_forward, .backward = copy_backward, .in_place = 1u};
static const cf_op_def op_tp_reduce = {.name = "tp_reduce", .n_outputs = 1, .infer = infer_like,
                                       .kernels[CF_BACKEND_CPU] = tp_forward, .backward = reduce_backward,
                                       .in_place = 1u};

static cf_tensor *add_tp_node(cf_graph *g, const cf_op_def *op, cf_tensor *x, const cf_dist_group *group, bool sum) {
    if (!x || alone(group)) return x;
    cf_node *n = cf_graph_node_add(g, op, (cf_tensor *[]){x}, 1, &(cf_attrs){.i = {sum}, .p = group});
    if (!n) return NULL;
    n->in_place = 1u;
    return n->outputs[0];
}

cf_tensor *cf_tp_copy(cf_graph *g, cf_tensor *x, const cf_dist_group *group) {
    return add_tp_node(g, &op_tp_copy, x, group, false);
}

cf_tensor *cf_tp_reduce(cf_graph *g, cf_tensor *x, const cf_dist_group *group) {
    return add_tp_node(g, &op_tp_reduce, x, group, true);
}

/* ---- tp_grad_norm: inputs the norm (f32 scalar, rewritten), the gradient block, the
 * split mask (i32 [n_params]), the statistics switch and per-parameter squares (from the
 * grad_norm node) and optionally the loss scale's inverse; attrs.p the group, attrs.i[0]
 * the graph's parameter count. Each parameter's squares are summed in double (one
 * parameter a task, added in block order: bit-identical for any thread count), the split
 * ones summed over the group with one all-reduce. ---- */

typedef struct norm_job {
    const cf_graph *graph;
    const float *grads;
    double *sq; /* [n_params + 1] */
} norm_job;

static void param_sum_squares(void *arg, int p, int thread) {
    (void)thread;
    norm_job *j = arg;
    const cf_tensor *t = j->graph->params[p];
    const float *g = j->grads + t->param_offset;
    double s = 0.0;
    for (int64_t i = 0, n = cf_tensor_numel(t); i < n; i++) s += (double)g[i] * g[i];
    j->sq[p] = s;
}

static void norm_forward(const cf_node *n) {
    const cf_dist_group *group = n->attrs.p;
    float *norm = cf_tensor_f32(n->inputs[0]);
    if (!isfinite(*norm)) return; /* an overflow: the update skips the step on every rank alike */
    int np = (int)n->attrs.i[0];
    const int32_t *split = cf_tensor_i32(n->inputs[2]);
    norm_job j = {.graph = n->inputs[0]->producer->attrs.p, /* grad_norm's graph */
                   .grads = cf_in(n, 1), .sq = n->workspace};
    cf_parallel_for(np, param_sum_squares, &j);
    double replicated = 0.0;
    j.sq[np] = 0.0;
    for (int p = 0; p < np; p++) {
        if (split[p]) j.sq[np] += j.sq[p];
        else replicated += j.sq[p], j.sq[p] = 0.0;
    }
    cf_error err = {{0}};
    if (cf_dist_check(MPI_Allreduce(MPI_IN_PLACE, j.sq, np + 1, MPI_DOUBLE, MPI_SUM, group->comm), "MPI_Allreduce",
                      &err) != 0) {
        cf_kernel_fail("tensor group all-reduce of the gradient norm: %s", err.msg);
        return;
    }
    double unscale = n->n_inputs > 5 ? *cf_in(n, 5) : 1.0;
    *norm = (float)(sqrt(replicated + j.sq[np]) * unscale);
    if (*cf_tensor_i32(n->inputs[3])) {
        float *per = cf_tensor_f32(n->inputs[4]);
        for (int p = 0; p < np; p++)
            if (split[p]) per[p] = (float)(j.sq[p] * unscale * unscale);
    }
}

static size_t norm_workspace(const cf_node *n) { return sizeof(double) * (size_t)(n->attrs.i[0] + 1); }

static int infer_nothing(cf_node *n, cf_error *err) {
    (void)n, (void)err;
    return 0;
}

static const cf_op_def op_tp_grad_norm = {.name = "tp_grad_norm", .n_outputs = 0, .infer = infer_nothing,
                                          .kernels[CF_BACKEND_CPU] = norm_forward, .workspace = norm_workspace,
                                          .mutates = 1u | 16u};

void cf_tp_grad_norm(cf_graph *g, const cf_dist_group *group, const bool *split) {
    if (g->failed || alone(group)) return;
    int at = -1;
    for (int k = 0; k < g->n_nodes && at < 0; k++)
        if (g->nodes[k]->op == &cf_op_grad_norm) at = k;
    if (at < 0) {
        cf_graph_fail(g, "tensor parallelism: the graph has no grad_norm node (build the update first)");
        return;
    }
    cf_node *gn = g->nodes[at];
    int64_t np = g->n_params;
    int32_t *mask = cf_xcalloc((size_t)(np > 0 ? np : 1), sizeof *mask);
    for (int64_t p = 0; p < np; p++) mask[p] = split[p];
    cf_phase saved = g->phase;
    g->phase = CF_PHASE_UPDATE;
    cf_tensor *m = cf_graph_const(g, "tp.split_params", CF_I32, 1, &np, mask);
    free(mask);
    cf_tensor *in[6] = {gn->outputs[0], gn->inputs[0], m, gn->inputs[1], gn->outputs[1],
                        gn->n_inputs > 2 ? gn->inputs[2] : NULL};
    cf_node *n = cf_graph_node_add(g, &op_tp_grad_norm, in, in[5] ? 6 : 5, &(cf_attrs){.i = {np}, .p = group});
    if (n) cf_graph_move_node(g, n, at + 1);
    g->phase = saved;
}
