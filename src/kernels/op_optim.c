/* The update phase: gradients added into the gradient block, the global gradient norm,
 * and AdamW over the whole parameter block in one flat loop. */
#include <math.h>
#include <string.h>

#include "cformers/threads.h"
#include "kernels/adamw.h"
#include "kernels/context/context.h"
#include "core/graph_internal.h"
#include "kernels/graph_ops.h"
#include "kernels/kernels.h"

/* grad_accumulate and grad_norm: flat loops over the gradient block. */
typedef struct flat_job {
    const float *g;
    float *grad;
    double *partial;
    long n, chunks;
} flat_job;

static int infer_nothing(cf_node *n, cf_error *err) { return 0; }

/* ---- grad_accumulate: inputs (gradient view, g); the view += g ---- */

static void accumulate_range(void *arg, long begin, long end) {
    flat_job *j = arg;
    for (long i = begin; i < end; i++) j->grad[i] += j->g[i];
}

static void grad_accumulate_forward(const cf_node *n) {
    flat_job j = {.grad = cf_tensor_f32(n->inputs[0]), .g = cf_in(n, 1)};
    cf_parallel_rows((long)cf_tensor_numel(n->inputs[0]), 1, accumulate_range, &j);
}

const cf_op_def cf_op_grad_accumulate = {.name = "grad_accumulate", .n_outputs = 0, .infer = infer_nothing,
                                         .kernels[CF_BACKEND_CPU] = grad_accumulate_forward, .mutates = 1u};

/* ---- grad_norm: inputs the gradient block, the statistics switch (i32 scalar) and
 * optionally the loss scale's inverse (f32 scalar: the block holds gradients times the
 * scale), attrs.p the graph; outputs the unscaled sqrt(sum g^2) and, on steps whose
 * switch is set, each parameter's unscaled sum of squares [n_params] (the gradient flow:
 * docs/training.md). A second pass over the block, only then, so the statistics cost
 * nothing on other steps. An inf or NaN anywhere in the block makes the norm non-finite:
 * this sum is the overflow check of loss scaling. ---- */

static int infer_grad_norm(cf_node *n, cf_error *err) {
    const cf_graph *g = n->attrs.p;
    cf_node_output(n, 0, CF_F32, 0, NULL);
    cf_node_output(n, 1, CF_F32, 1, (int64_t[]){g->n_params > 0 ? g->n_params : 1});
    return 0;
}

typedef struct param_sq_job {
    const cf_graph *graph;
    const float *g;
    float *out;
    double unscale2;
} param_sq_job;

static void param_squares(void *arg, int p, int thread) {
    param_sq_job *j = arg;
    const cf_tensor *t = j->graph->params[p];
    const float *g = j->g + t->param_offset;
    double s = 0.0;
    for (int64_t i = 0, n = cf_tensor_numel(t); i < n; i++) s += (double)g[i] * g[i];
    j->out[p] = (float)(s * j->unscale2);
}

/* Eight running sums, so the additions do not wait on each other (one chain of double
 * adds ran at its latency, ~4 cycles an element); the lanes are added in a fixed order. */
static void sum_squares_chunk(void *arg, int chunk, int thread) {
    enum { LANES = 8 };
    flat_job *j = arg;
    long begin, end;
    cf_split_range(j->n, (int)j->chunks, chunk, &begin, &end);
    double lane[LANES] = {0};
    long i = begin;
    for (; i + LANES <= end; i += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += (double)j->g[i + l] * j->g[i + l];
    double s = 0.0;
    for (; i < end; i++) s += (double)j->g[i] * j->g[i];
    for (int l = 0; l < LANES; l++) s += lane[l];
    j->partial[chunk] = s;
}

static void grad_norm_forward(const cf_node *n) {
    long elems = (long)cf_tensor_numel(n->inputs[0]);
    flat_job j = {.g = cf_in(n, 0), .partial = n->workspace, .n = elems, .chunks = cf_reduce_chunks(elems)};
    cf_parallel_for((int)j.chunks, sum_squares_chunk, &j);
    double total = 0.0;
    for (long c = 0; c < j.chunks; c++) total += j.partial[c];
    double unscale = n->n_inputs > 2 ? *cf_in(n, 2) : 1.0;
    *cf_out(n, 0) = (float)(sqrt(total) * unscale);
    if (*cf_tensor_i32(n->inputs[1])) {
        param_sq_job pj = {.graph = n->attrs.p, .g = j.g, .out = cf_out(n, 1), .unscale2 = unscale * unscale};
        cf_parallel_for(pj.graph->n_params, param_squares, &pj);
    }
}

static size_t grad_norm_workspace(const cf_node *n) { return sizeof(double) * CF_REDUCE_CHUNKS; }

const cf_op_def cf_op_grad_norm = {.name = "grad_norm", .n_outputs = 2, .infer = infer_grad_norm,
                                   .kernels[CF_BACKEND_CPU] = grad_norm_forward, .workspace = grad_norm_workspace};

/* ---- adamw: inputs (params, grads, m, v, step, lr, grad_norm[, the loss scale's inverse,
 * which multiplies every gradient]), attrs.f = {beta1, beta2,
 * eps, weight_decay, max_grad_norm}, attrs.p = the graph (for the decay mask), attrs.i[0]
 * = the step after which the second moment is frozen (0: never; 1-bit compression sets
 * it, as 1-bit Adam does: sign-compressed gradients carry one magnitude per chunk, so
 * their squares would flatten v, Adam's per-element step size) ---- */

/* Index of the parameter whose (aligned) span holds flat element i. */
static int param_holding(const cf_graph *g, long i) {
    int lo = 0, hi = g->n_params - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (g->params[mid]->param_offset <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

typedef struct adamw_job {
    const cf_graph *graph;
    cf_adamw_span_fn span;
    cf_adamw_step step;
    float *p, *grad, *m, *v; /* m and v hold elements [lo, lo + n) of the block */
    float lr, wd;
    long lo, n;
} adamw_job;

/* Elements [begin, end) of the optimizer's range, parameter by parameter (the decay
 * differs between them). */
static void adamw_range(void *arg, long begin, long end) {
    adamw_job *j = arg;
    const cf_graph *g = j->graph;
    begin += j->lo;
    end += j->lo;
    for (int p = param_holding(g, begin); p < g->n_params && g->params[p]->param_offset < end; p++) {
        long span_end = p + 1 < g->n_params ? (long)g->params[p + 1]->param_offset : (long)g->param_elems;
        long lo = begin > g->params[p]->param_offset ? begin : (long)g->params[p]->param_offset;
        long hi = end < span_end ? end : span_end;
        float decay = g->params[p]->weight_decay ? 1.0f - j->lr * j->wd : 1.0f;
        j->span(&j->step, decay, j->p + lo, j->grad + lo, j->m + (lo - j->lo), j->v + (lo - j->lo), hi - lo);
    }
}

static void adamw_forward(const cf_node *n) {
    const double *f = n->attrs.f;
    float norm = *cf_in(n, 6), max_norm = (float)f[4];
    long elems = (long)cf_tensor_numel(n->inputs[0]);
    int64_t lo, hi;
    cf_graph_optimizer_range(n->attrs.p, &lo, &hi);
    if (!isfinite(norm)) { /* overflowed (loss scaling) or diverged: skip the step, as GradScaler does */
        memset(cf_tensor_f32(n->inputs[1]), 0, sizeof(float) * (size_t)elems);
        return;
    }
    int32_t *step = cf_tensor_i32(n->inputs[4]);
    int t = ++*step;
    int64_t freeze = n->attrs.i[0];
    double beta2 = f[1], bc2 = 1.0 - pow(f[1], t);
    if (freeze > 0 && t > freeze) { /* v stays as it was after step `freeze`, bias correction too */
        beta2 = 1.0;
        bc2 = 1.0 - pow(f[1], (double)freeze);
    }
    /* As torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1. */
    float clip = max_norm > 0.0f ? max_norm / (norm + 1e-6f) : 1.0f, lr = *cf_in(n, 5);
    float unscale = n->n_inputs > 7 ? *cf_in(n, 7) : 1.0f;
    adamw_job j = {.graph = n->attrs.p, .span = cf_kernels()->adamw_span,
                   .step = {.beta1 = (float)f[0], .beta2 = (float)beta2, .clip = (clip < 1.0f ? clip : 1.0f) * unscale,
                            .step_size = (float)(lr / (1.0 - pow(f[0], t))), .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
                            .eps = (float)f[2]},
                   .p = cf_tensor_f32(n->inputs[0]), .grad = cf_tensor_f32(n->inputs[1]),
                   .m = cf_tensor_f32(n->inputs[2]), .v = cf_tensor_f32(n->inputs[3]), .lr = lr, .wd = (float)f[3],
                   .lo = (long)lo, .n = (long)(hi - lo)};
    cf_parallel_rows(j.n, 12, adamw_range, &j);
}

const cf_op_def cf_op_adamw = {.name = "adamw", .n_outputs = 0, .infer = infer_nothing,
                               .kernels[CF_BACKEND_CPU] = adamw_forward, .mutates = 0x1fu};

cf_tensor *cf_graph_adamw(cf_graph *g, const cf_adamw_config *cfg, cf_tensor *lr) {
    return cf_graph_adamw_scaled(g, cfg, lr, NULL);
}

cf_tensor *cf_graph_adamw_scaled(cf_graph *g, const cf_adamw_config *cfg, cf_tensor *lr, cf_tensor *unscale) {
    if (g->failed) return NULL;
    if (!lr || lr->dtype != CF_F32 || cf_tensor_numel(lr) != 1)
        return cf_graph_fail(g, "adamw: the learning rate must be an f32 scalar tensor");
    if (unscale && (unscale->dtype != CF_F32 || cf_tensor_numel(unscale) != 1))
        return cf_graph_fail(g, "adamw: the gradient unscale factor must be an f32 scalar tensor");
    if (g->n_params == 0) return cf_graph_fail(g, "adamw: the graph has no parameters");
    if (!g->differentiated) return cf_graph_fail(g, "adamw: call cf_graph_backward first");
    cf_param_blocks b = cf_graph_blocks(g);
    cf_phase saved = g->phase;
    g->phase = CF_PHASE_UPDATE;
    cf_tensor *stats = cf_graph_input(g, "grad_stats", CF_I32, 0, NULL);
    cf_tensor *norm = cf_op_apply(g, &cf_op_grad_norm, (cf_tensor *[]){b.grads, stats, unscale}, unscale ? 3 : 2,
                                  &(cf_attrs){.p = g});
    if (!norm) return NULL;
    cf_tensor_set_name(norm, "grad_norm");
    cf_graph_keep(g, norm);
    cf_tensor_set_name(norm->producer->outputs[1], "grad_norm.per_param_sq");
    cf_graph_keep(g, norm->producer->outputs[1]);
    cf_attrs attrs = {.f = {cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay, cfg->max_grad_norm}, .p = g};
    cf_tensor *in[8] = {b.params, b.grads, b.adam_m, b.adam_v, b.step, lr, norm, unscale};
    cf_graph_node_add(g, &cf_op_adamw, in, unscale ? 8 : 7, &attrs);
    g->phase = saved;
    return g->failed ? NULL : norm;
}

cf_grad_stats_tensors cf_graph_grad_stats(const cf_tensor *grad_norm) {
    const cf_node *n = grad_norm->producer;
    CF_ASSERT(n && n->op == &cf_op_grad_norm);
    return (cf_grad_stats_tensors){.enable = n->inputs[1], .param_sq = n->outputs[1]};
}
