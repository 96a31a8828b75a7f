/* A user-defined op, registered from outside the library with only the public headers:
 * y = x^3 (elementwise, pool-parallel) with a backward made of built-in ops
 * (dy * 3 x^2), gradient-checked and trained through. */
#include <stdio.h>
#include <string.h>

#include "cformers/gradcheck.h"
#include "cformers/graph.h"
#include "cformers/op.h"
#include "cformers/plan.h"
#include "cformers/threads.h"

static int failures;
#define EXPECT(cond)                                                                                                   \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);                                       \
        }                                                                                                              \
    } while (0)

static int cube_infer(cf_node *n, cf_error *err) {
    if (n->inputs[0]->dtype != CF_F32) return cf_fail(err, "cube needs f32, got %s", cf_dtype_name(n->inputs[0]->dtype));
    cf_node_output_like(n, 0, n->inputs[0]);
    return 0;
}

typedef struct cube_job {
    const float *x;
    float *y;
    long n;
} cube_job;

static void cube_task(void *arg, int task, int thread) {
    const cube_job *j = arg;
    long begin, end;
    cf_split_range(j->n, 4, task, &begin, &end);
    for (long i = begin; i < end; i++) j->y[i] = j->x[i] * j->x[i] * j->x[i];
}

static void cube_forward(const cf_node *n) {
    cube_job j = {cf_tensor_f32(n->inputs[0]), cf_tensor_f32(n->outputs[0]), (long)cf_tensor_numel(n->inputs[0])};
    cf_parallel_for(4, cube_task, &j);
}

static void cube_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
    cf_tensor *x = n->inputs[0];
    dx[0] = cf_nn_mul(g, dy[0], cf_nn_scale(g, cf_nn_mul(g, x, x), 3.0f));
}

static const cf_op_def cube_op = {.name = "test.cube", .n_outputs = 1, .infer = cube_infer,
                                  .kernels[CF_BACKEND_CPU] = cube_forward, .backward = cube_backward};

static cf_tensor *cube(cf_graph *g, cf_tensor *x) {
    cf_node *n = cf_graph_node_add(g, cf_op_find("test.cube"), (cf_tensor *[]){x}, 1, NULL);
    return n ? n->outputs[0] : NULL;
}

int main(void) {
    cf_error err = {{0}};
    EXPECT(cf_op_find("test.cube") == NULL);
    EXPECT(cf_op_register(&cube_op, &err) == 0);
    EXPECT(cf_op_find("test.cube") == &cube_op);
    EXPECT(cf_op_register(&cube_op, &err) == -1 && strstr(err.msg, "already registered"));
    static const cf_op_def clash = {.name = "matmul", .n_outputs = 1, .infer = cube_infer,
                                    .kernels[CF_BACKEND_CPU] = cube_forward};
    EXPECT(cf_op_register(&clash, &err) == -1 && strstr(err.msg, "matmul"));

    /* Gradient check of cube inside a small expression: sum-weighted cube(a) * b. */
    cf_graph *g = cf_graph_create();
    int64_t shape[2] = {5, 7};
    cf_tensor *a = cf_graph_param(g, "a", 2, shape, cf_init_zeros(), false);
    cf_tensor *b = cf_graph_param(g, "b", 2, shape, cf_init_zeros(), false);
    cf_gradcheck_opts opts = {.seed = 5};
    cf_gradcheck_result res;
    EXPECT(cf_gradcheck(g, cf_nn_mul(g, cube(g, a), b), &opts, &res, &err) == 0);
    printf("custom op gradcheck: %ld elements, max abs err %.2e (%s)\n", res.checked, res.max_abs_err, err.msg);
    cf_graph_free(g);

    /* Its infer rule's error reaches the graph's error, naming the op. */
    g = cf_graph_create();
    cf_tensor *ids = cf_graph_input(g, "ids", CF_I32, 1, shape);
    EXPECT(cube(g, ids) == NULL);
    EXPECT(cf_graph_error(g, &err) == -1 && strstr(err.msg, "test.cube") && strstr(err.msg, "i32"));
    cf_graph_free(g);

    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    printf("custom op: all checks passed\n");
    return 0;
}
