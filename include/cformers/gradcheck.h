/* Finite-difference gradient check for graphs and ops.
 *
 * Given a graph whose output y depends on parameters, the check draws a random weight
 * tensor r and compares the analytic gradient of L = sum(r * y) (autodiff, f32 kernels)
 * with central differences (L(p + h) - L(p - h)) / 2h, where L is accumulated in f64
 * from the forward outputs. Used by the op tests and for user-registered ops. */
#ifndef CFORMERS_GRADCHECK_H
#define CFORMERS_GRADCHECK_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdint.h>

#include "cformers/error.h"
#include "cformers/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_gradcheck_opts {
    double step;          /* h; 0: 1e-2 */
    double tol_abs;       /* passes when |analytic - numeric| <= tol_abs + tol_rel * |numeric| */
    double tol_rel;       /* 0 and 0: 1e-3 and 1e-2 */
    int max_elems;        /* elements checked per parameter (a seeded random subset); 0: 64 */
    uint64_t seed;        /* for parameter values, r and the subset */
    /* Fills inputs after planning (i32 ids, masks). NULL: f32 inputs get normal(0, 1);
     * other inputs are zeroed. Parameters always get normal(0, 1) unless this sets them
     * (return 1 to say "done", 0 to take the default). */
    int (*fill)(cf_tensor *t, void *ctx);
    void *fill_ctx;
} cf_gradcheck_opts;

typedef struct cf_gradcheck_result {
    double max_abs_err, max_rel_err; /* rel = abs / max(|numeric|, 1e-3) */
    long checked;                    /* elements compared */
    char worst[CF_NAME_MAX + 32];    /* "param[index]" with the largest error */
} cf_gradcheck_result;

/* Builds the backward of g from y (g must not be differentiated yet), plans, and checks
 * every parameter. Returns 0 when all elements pass, -1 with err naming the parameter,
 * element and both values otherwise. res (optional) receives the statistics. */
int cf_gradcheck(cf_graph *g, cf_tensor *y, const cf_gradcheck_opts *opts, cf_gradcheck_result *res, cf_error *err);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
