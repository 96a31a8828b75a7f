/* Finite-difference gradient check (see gradcheck.h). */
#include "cformers/gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/plan.h"
#include "cformers/rng.h"

typedef struct check_ctx {
    cf_plan *plan;
    const cf_tensor *y, *r;
    cf_rng rng;
    cf_gradcheck_opts opts;
    cf_gradcheck_result res;
    double worst_excess; /* error beyond tolerance of the worst element, <= 0 when all pass */
    char failure[CF_ERROR_MSG_MAX];
} check_ctx;

/* L = sum(r * y), in f64, after a forward pass (its integer inputs are those of the first
 * run, which succeeded, so no kernel fails here). */
static double weighted_loss(check_ctx *c) {
    int rc = cf_plan_run(c->plan, CF_PHASE_FORWARD, NULL);
    CF_ASSERT(rc == 0);
    const float *y = cf_tensor_f32(c->y), *r = cf_tensor_f32(c->r);
    double sum = 0.0;
    for (int64_t i = 0; i < cf_tensor_numel(c->y); i++) sum += (double)r[i] * y[i];
    return sum;
}

/* Inputs and parameters (not the whole-block tensors): the caller's fill first, else
 * normal(0, 1) for f32 and zeros for the rest. */
static void fill_leaves(check_ctx *c, cf_graph *g) {
    const cf_tensor *block = cf_graph_blocks(g).params;
    for (int i = 0; i < cf_graph_num_tensors(g); i++) {
        cf_tensor *t = cf_graph_tensor(g, i);
        if ((t->role != CF_ROLE_INPUT && t->role != CF_ROLE_PARAM) || t == block || t->view_of) continue;
        if (t != c->r && c->opts.fill && c->opts.fill(t, c->opts.fill_ctx)) continue;
        if (t->dtype == CF_F32)
            cf_rng_fill_normal(&c->rng, cf_tensor_f32(t), (size_t)cf_tensor_numel(t), 0.0f, 1.0f);
        else
            memset(t->data, 0, cf_tensor_bytes(t));
    }
}

static void check_element(check_ctx *c, const cf_tensor *p, int64_t idx, float analytic) {
    float *x = cf_tensor_f32(p) + idx, orig = *x;
    float hi = (float)(orig + c->opts.step), lo = (float)(orig - c->opts.step);
    *x = hi;
    double l_hi = weighted_loss(c);
    *x = lo;
    double l_lo = weighted_loss(c);
    *x = orig;
    double numeric = (l_hi - l_lo) / ((double)hi - (double)lo);
    double abs_err = fabs(analytic - numeric), rel_err = abs_err / fmax(fabs(numeric), 1e-3);
    double excess = abs_err - (c->opts.tol_abs + c->opts.tol_rel * fabs(numeric));
    c->res.checked++;
    if (abs_err > c->res.max_abs_err) c->res.max_abs_err = abs_err;
    if (rel_err > c->res.max_rel_err) c->res.max_rel_err = rel_err;
    if (excess > c->worst_excess) {
        c->worst_excess = excess;
        snprintf(c->res.worst, sizeof c->res.worst, "%s[%lld]", p->name, (long long)idx);
        snprintf(c->failure, sizeof c->failure, "gradcheck: %s: analytic %.6g, numeric %.6g (|diff| %.3g)",
                 c->res.worst, analytic, numeric, abs_err);
    }
}

static void check_param(check_ctx *c, const cf_tensor *p, const float *analytic) {
    int64_t n = cf_tensor_numel(p);
    int64_t count = n < c->opts.max_elems ? n : c->opts.max_elems;
    for (int64_t k = 0; k < count; k++) {
        int64_t idx = count == n ? k : (int64_t)cf_rng_below(&c->rng, (uint64_t)n);
        check_element(c, p, idx, analytic[p->param_offset + idx]);
    }
}

int cf_gradcheck(cf_graph *g, cf_tensor *y, const cf_gradcheck_opts *opts, cf_gradcheck_result *res, cf_error *err) {
    check_ctx c = {.opts = opts ? *opts : (cf_gradcheck_opts){0}, .worst_excess = 0.0};
    if (c.opts.step <= 0) c.opts.step = 1e-2;
    if (c.opts.tol_abs <= 0 && c.opts.tol_rel <= 0) {
        c.opts.tol_abs = 1e-3;
        c.opts.tol_rel = 1e-2;
    }
    if (c.opts.max_elems <= 0) c.opts.max_elems = 64;
    if (!y || y->dtype != CF_F32) return cf_fail(err, "gradcheck: the output must be an f32 tensor");
    cf_tensor *r = cf_graph_input(g, "gradcheck.weights", CF_F32, y->ndim, y->shape);
    cf_graph_keep(g, y);
    if (cf_graph_backward_from(g, y, r, err)) return -1;
    if (!(c.plan = cf_plan_create(g, err))) return -1;
    c.y = y;
    c.r = r;
    cf_rng_seed(&c.rng, c.opts.seed);
    fill_leaves(&c, g);

    if (cf_plan_run(c.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, err) != 0) {
        cf_plan_free(c.plan);
        return -1;
    }
    int64_t elems = cf_graph_param_elems(g);
    float *analytic = cf_xmalloc(sizeof(float) * (size_t)(elems ? elems : 1));
    memcpy(analytic, cf_tensor_f32(cf_graph_blocks(g).grads), sizeof(float) * (size_t)elems);
    for (int i = 0; i < cf_graph_num_params(g); i++) check_param(&c, cf_graph_param_at(g, i), analytic);
    free(analytic);
    cf_plan_free(c.plan);
    if (res) *res = c.res;
    if (c.worst_excess > 0) return cf_fail(err, "%s", c.failure);
    return 0;
}
