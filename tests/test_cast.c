/* The cast op: f32 -> bf16 rounds to nearest even exactly as cf_f32_to_bf16, bf16 -> f32
 * is exact, and the gradient is the incoming one cast back to the input's dtype. A
 * finite-difference check does not apply: rounding is piecewise constant, and the cast's
 * gradient is the identity by definition (as in mixed-precision training), so the test
 * checks that definition exactly: through f32 -> bf16 -> f32 the gradient reaching x is
 * the seed rounded to bf16 once (by the inner cast's backward). */
#include <stdint.h>

#include "cformers/graph.h"
#include "cformers/plan.h"
#include "test_util.h"

enum { N = 7 };

int main(void) {
    cf_graph *g = cf_graph_create();
    int64_t shape[1] = {N};
    cf_tensor *x = cf_graph_param(g, "x", 1, shape, cf_init_zeros(), false);
    cf_tensor *x16 = cf_nn_cast(g, x, CF_BF16);
    cf_tensor *y = cf_nn_cast(g, x16, CF_F32);
    cf_tensor *dy = cf_graph_input(g, "dy", CF_F32, 1, shape);
    CHECK(cf_nn_cast(g, x, CF_F32) == x); /* no node when nothing changes */
    CHECK(x16->dtype == CF_BF16 && y->dtype == CF_F32);
    cf_graph_keep(g, x16);
    cf_graph_keep(g, y);
    cf_error err = {{0}};
    CHECK_MSG(cf_graph_backward_from(g, y, dy, &err) == 0, "%s", err.msg);
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (plan) {
        /* 1 + 2^-8 is a tie that rounds down to even, 1 + 3 * 2^-8 one that rounds up. */
        const float in[N] = {1.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -3.14159f, 1e-30f, 65504.5f, -0.0f};
        const float seed[N] = {0.1f, -1.0f / 3, 7.77f, 1e-3f, -2.5f, 123.456f, 0.0f};
        for (int i = 0; i < N; i++) {
            cf_tensor_f32(x)[i] = in[i];
            cf_tensor_f32(dy)[i] = seed[i];
        }
        CHECK(cf_plan_run(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
        const cf_bf16 *h = x16->data;
        for (int i = 0; i < N; i++) {
            CHECK_MSG(h[i] == cf_f32_to_bf16(in[i]), "x16[%d] = 0x%04x, want 0x%04x", i, h[i], cf_f32_to_bf16(in[i]));
            CHECK(cf_tensor_f32(y)[i] == cf_bf16_to_f32(h[i]));
            CHECK(x->grad && cf_tensor_f32(x->grad)[i] == cf_bf16_to_f32(cf_f32_to_bf16(seed[i])));
        }
        CHECK(h[1] == 0x3F80 && h[2] == 0x3F82);
    }
    cf_plan_free(plan);
    cf_graph_free(g);

    /* Only f32 <-> bf16. */
    g = cf_graph_create();
    cf_tensor *ids = cf_graph_input(g, "ids", CF_I32, 1, shape);
    CHECK(cf_nn_cast(g, ids, CF_F32) == NULL);
    CHECK(cf_graph_error(g, &err) == -1);
    CHECK_CONTAINS(err.msg, "cast");
    cf_graph_free(g);
    return test_finish();
}
