/* Graph construction, registry and autodiff structure: built-in ops are registered,
 * shape errors stick and name the op and tensors, parameters are laid out in one
 * aligned block, gradients of reused tensors are summed, views share storage, and a
 * planned graph cannot change. */
#include <stdint.h>

#include "cformers/graph.h"
#include "cformers/plan.h"
#include "test_util.h"

#define SHAPE(...) ((int64_t[]){__VA_ARGS__})

static void check_registry(void) {
    const char *builtins[] = {"add", "mul", "scale", "add_broadcast", "matmul", "embedding", "rmsnorm", "layernorm",
                              "rope", "attention", "swiglu", "gelu", "cross_entropy", "reshape", "adamw", "grad_norm"};
    for (size_t i = 0; i < sizeof builtins / sizeof builtins[0]; i++)
        CHECK_MSG(cf_op_find(builtins[i]) != NULL, "%s missing", builtins[i]);
    CHECK(cf_op_find("no.such.op") == NULL);
    CHECK(cf_op_find("matmul")->backward != NULL);
}

static void check_sticky_errors(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *a = cf_graph_input(g, "a", CF_F32, 2, SHAPE(2, 3));
    cf_tensor *b = cf_graph_input(g, "b", CF_F32, 2, SHAPE(3, 2));
    CHECK(cf_nn_add(g, a, b) == NULL);
    cf_error err = {{0}};
    CHECK(cf_graph_error(g, &err) == -1);
    CHECK_CONTAINS(err.msg, "add");
    CHECK_CONTAINS(err.msg, "[2, 3]");
    CHECK_CONTAINS(err.msg, "[3, 2]");
    /* Later calls return NULL and keep the first message. */
    CHECK(cf_nn_matmul(g, a, b, false, false) == NULL);
    cf_error again;
    cf_graph_error(g, &again);
    CHECK(strcmp(err.msg, again.msg) == 0);
    cf_graph_free(g);

    g = cf_graph_create();
    a = cf_graph_input(g, "a", CF_F32, 2, SHAPE(2, 3));
    CHECK(cf_nn_matmul(g, a, a, false, false) == NULL);
    cf_graph_error(g, &err);
    CHECK_CONTAINS(err.msg, "matmul");
    cf_graph_free(g);

    g = cf_graph_create();
    CHECK(cf_graph_input(g, "bad", CF_F32, 2, SHAPE(2, 0)) == NULL);
    cf_graph_error(g, &err);
    CHECK_CONTAINS(err.msg, "bad");
    cf_graph_free(g);
}

static void check_param_layout(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *w = cf_graph_param(g, "w", 2, SHAPE(3, 5), cf_init_normal(0.02f), true);
    cf_tensor *b = cf_graph_param(g, "b", 1, SHAPE(5), cf_init_zeros(), false);
    cf_tensor *n = cf_graph_param(g, "n", 1, SHAPE(16), cf_init_ones(), false);
    CHECK(cf_graph_param(g, "w", 1, SHAPE(2), cf_init_zeros(), false) == NULL); /* duplicate name */
    cf_error err;
    cf_graph_error(g, &err);
    CHECK_CONTAINS(err.msg, "w");
    cf_graph_free(g);

    g = cf_graph_create();
    w = cf_graph_param(g, "w", 2, SHAPE(3, 5), cf_init_normal(0.02f), true);
    b = cf_graph_param(g, "b", 1, SHAPE(5), cf_init_zeros(), false);
    n = cf_graph_param(g, "n", 1, SHAPE(16), cf_init_ones(), false);
    CHECK(cf_graph_num_params(g) == 3 && cf_graph_param_at(g, 1) == b);
    CHECK(w->param_offset == 0 && b->param_offset == 16 && n->param_offset == 32);
    CHECK(cf_graph_param_elems(g) == 48);
    CHECK(w->weight_decay && !b->weight_decay);
    /* The blocks fix the layout: no parameters after them. */
    cf_param_blocks blocks = cf_graph_blocks(g);
    CHECK(blocks.params && cf_tensor_numel(blocks.grads) == 48 && blocks.step->dtype == CF_I32);
    CHECK(cf_graph_param(g, "late", 1, SHAPE(1), cf_init_ones(), false) == NULL);
    cf_graph_error(g, &err);
    CHECK_CONTAINS(err.msg, "late");
    cf_graph_free(g);
}

/* w is used twice by matmuls: each contribution to its gradient goes straight into the
 * gradient block (the matmuls accumulate), never through a temporary sum. */
static void check_autodiff_structure(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *w = cf_graph_param(g, "w", 2, SHAPE(3, 3), cf_init_ones(), true);
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 2, SHAPE(2, 3));
    cf_tensor *y = cf_nn_matmul(g, cf_nn_matmul(g, x, w, false, true), w, false, true);
    cf_tensor *targets = cf_graph_input(g, "t", CF_I32, 1, SHAPE(2));
    cf_tensor *loss = cf_nn_cross_entropy(g, y, targets);
    int forward_nodes = cf_graph_num_nodes(g);
    cf_error err = {{0}};
    CHECK(!x->requires_grad && w->requires_grad && y->requires_grad);
    CHECK(cf_graph_backward(g, y, &err) == -1); /* not a scalar */
    CHECK_CONTAINS(err.msg, "scalar");
    CHECK(cf_graph_backward(g, loss, &err) == 0);
    CHECK(cf_graph_backward(g, loss, &err) == -1);
    CHECK(w->grad && w->grad->role == CF_ROLE_GRAD && w->grad->param_offset == w->param_offset);
    int adds = 0, accumulates = 0, into_block = 0;
    for (int i = forward_nodes; i < cf_graph_num_nodes(g); i++) {
        cf_node *n = cf_graph_node(g, i);
        CHECK(n->phase == CF_PHASE_BACKWARD);
        adds += strcmp(n->op->name, "add") == 0;
        accumulates += strcmp(n->op->name, "grad_accumulate") == 0;
        into_block += n->n_outputs > 0 && n->outputs[0]->role == CF_ROLE_GRAD && (n->accumulate & 1u);
    }
    CHECK(adds == 0 && accumulates == 0);
    CHECK(into_block == 2); /* the two contributions to dw */

    /* Numbers: x = 1, w = 1 (ones init) -> plan and run, dw is finite and nonzero. */
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (plan) {
        cf_plan_init_params(plan, 1);
        for (int i = 0; i < 6; i++) cf_tensor_f32(x)[i] = (float)i * 0.1f;
        cf_tensor_i32(targets)[0] = 1;
        cf_tensor_i32(targets)[1] = 2;
        CHECK(cf_plan_run(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
        float total = 0;
        for (int i = 0; i < 9; i++) total += fabsf(cf_tensor_f32(w->grad)[i]);
        CHECK(total > 0 && isfinite(total));
        /* A planned graph is frozen. */
        CHECK(cf_nn_add(g, y, y) == NULL);
        cf_graph_error(g, &err);
        CHECK_CONTAINS(err.msg, "planned");
        cf_plan_free(plan);
    }
    cf_graph_free(g);
}

static void check_views(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 3, SHAPE(2, 3, 4));
    cf_tensor *v = cf_nn_reshape(g, x, 2, SHAPE(6, 4));
    CHECK(cf_nn_reshape(g, x, 3, SHAPE(2, 3, 4)) == x);
    CHECK(cf_nn_reshape(g, x, 2, SHAPE(5, 5)) == NULL);
    cf_graph_free(g);
    g = cf_graph_create();
    x = cf_graph_input(g, "x", CF_F32, 3, SHAPE(2, 3, 4));
    v = cf_nn_reshape(g, cf_nn_scale(g, x, 2.0f), 2, SHAPE(6, 4));
    cf_tensor *y = cf_nn_scale(g, v, 1.0f);
    cf_graph_keep(g, y);
    cf_error err;
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK(plan && v->view_of && v->data == v->view_of->data);
    for (int i = 0; i < 24; i++) cf_tensor_f32(x)[i] = (float)i;
    CHECK(cf_plan_run(plan, CF_PHASE_ALL, NULL) == 0);
    CHECK(cf_tensor_f32(y)[23] == 46.0f);
    cf_plan_free(plan);
    cf_graph_free(g);
}

static int count_nodes(const cf_graph *g, const char *op) {
    int n = 0;
    for (int i = 0; i < cf_graph_num_nodes(g); i++) n += strcmp(cf_graph_node(g, i)->op->name, op) == 0;
    return n;
}

/* Weight gradients land in the gradient block straight from the op that computes them,
 * except where a gradient is shared: out = (p + a c) w hands one tensor to both p and
 * the a c product, which must then not be redirected, or accumulation breaks. */
static void check_direct_accumulation(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *a = cf_graph_param(g, "a", 2, SHAPE(3, 4), cf_init_normal(1.0f), true);
    cf_tensor *c = cf_graph_param(g, "c", 2, SHAPE(4, 5), cf_init_normal(1.0f), true);
    cf_tensor *p = cf_graph_param(g, "p", 2, SHAPE(3, 5), cf_init_normal(1.0f), true);
    cf_tensor *w = cf_graph_param(g, "w", 2, SHAPE(5, 2), cf_init_normal(1.0f), true);
    cf_tensor *out = cf_nn_matmul(g, cf_nn_add(g, p, cf_nn_matmul(g, a, c, false, false)), w, false, false);
    cf_tensor *targets = cf_graph_input(g, "t", CF_I32, 1, SHAPE(3));
    cf_error err = {{0}};
    CHECK(cf_graph_backward(g, cf_nn_cross_entropy(g, out, targets), &err) == 0);
    CHECK(count_nodes(g, "grad_accumulate") == 1); /* p only */
    CHECK(p->grad->producer == NULL && w->grad->producer && a->grad->producer && c->grad->producer);
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (plan) {
        cf_plan_init_params(plan, 3);
        int64_t n = cf_graph_param_elems(g);
        CHECK(n <= 128);
        float *grads = cf_tensor_f32(cf_graph_blocks(g).grads), once[128];
        CHECK(cf_plan_run(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
        memcpy(once, grads, sizeof(float) * (size_t)n);
        CHECK(cf_plan_run(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
        int bad = 0;
        for (int64_t i = 0; i < n; i++) bad += fabsf(grads[i] - 2.0f * once[i]) > 1e-5f * (1.0f + fabsf(once[i]));
        CHECK_MSG(bad == 0, "%d gradients did not accumulate", bad);
        cf_plan_free(plan);
    }
    cf_graph_free(g);
}

int main(void) {
    check_registry();
    check_sticky_errors();
    check_param_layout();
    check_autodiff_structure();
    check_views();
    check_direct_accumulation();
    return test_finish();
}
