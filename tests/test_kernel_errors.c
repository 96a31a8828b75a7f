/* Kernels that meet bad data make cf_plan_run return an error naming the op, the node
 * and the value (never abort the process), on 1 and 2 threads: an embedding, a
 * cross-entropy and a fused linear cross-entropy fed an id past the vocabulary; a kernel
 * failing on a pool worker (not the calling thread) reaches the caller's run. The nodes
 * after the failing one do not run, the next run with good data succeeds, and a plan
 * refuses an op without a kernel for its backend, as the registry does. A plan whose
 * memory the machine cannot give fails with an error instead of aborting. */
#include <stdint.h>
#include <string.h>

#include "cformers/fused.h"
#include "cformers/graph.h"
#include "cformers/plan.h"
#include "cformers/threads.h"
#include "test_util.h"

enum { VOCAB = 16, DIM = 8, ROWS = 24, BAD_ROW = 17, BAD_ID = 999 };

static void fill_ids(int32_t *ids, int bad_row) {
    for (int r = 0; r < ROWS; r++) ids[r] = (r * 5) % VOCAB;
    if (bad_row >= 0) ids[bad_row] = BAD_ID;
}

/* embedding -> scale; the scale (after the failing node) must not run. */
static void check_embedding(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *table = cf_graph_param(g, "table", 2, (int64_t[]){VOCAB, DIM}, cf_init_normal(0.02f), false);
    cf_tensor *ids = cf_graph_input(g, "ids", CF_I32, 2, (int64_t[]){2, ROWS / 2});
    cf_tensor *after = cf_nn_scale(g, cf_nn_embedding(g, table, ids), 2.0f);
    cf_graph_keep(g, after);
    cf_error err = {{0}};
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (!plan) return;
    cf_plan_init_params(plan, 1);
    float *y = cf_tensor_f32(after);
    for (int64_t i = 0; i < cf_tensor_numel(after); i++) y[i] = -7.0f;
    fill_ids(cf_tensor_i32(ids), BAD_ROW);
    CHECK(cf_plan_run(plan, CF_PHASE_FORWARD, &err) == -1);
    CHECK_CONTAINS(err.msg, "embedding (node 0): token id 999 at row 17 of ids is outside the vocabulary of 16");
    CHECK(strchr(err.msg, '\n') == NULL);
    CHECK(y[0] == -7.0f && y[cf_tensor_numel(after) - 1] == -7.0f); /* the run stopped after the embedding */
    fill_ids(cf_tensor_i32(ids), -1);
    CHECK(cf_plan_run(plan, CF_PHASE_FORWARD, &err) == 0);
    CHECK(y[0] == 2.0f * cf_tensor_f32(table)[0]); /* row 0 gathers id 0 */
    cf_tensor_i32(ids)[3] = -1; /* negative ids are outside too */
    CHECK(cf_plan_run(plan, CF_PHASE_FORWARD, &err) == -1);
    CHECK_CONTAINS(err.msg, "token id -1 at row 3 of ids");
    cf_plan_free(plan);
    cf_graph_free(g);
}

/* Cross-entropy, plain (logits given) or fused with the output projection. */
static void check_cross_entropy(bool fused) {
    cf_graph *g = cf_graph_create();
    cf_tensor *targets = cf_graph_input(g, "targets", CF_I32, 1, (int64_t[]){ROWS});
    cf_tensor *loss;
    if (fused) {
        cf_tensor *x = cf_graph_param(g, "x", 2, (int64_t[]){ROWS, DIM}, cf_init_normal(0.5f), true);
        cf_tensor *w = cf_graph_param(g, "w", 2, (int64_t[]){VOCAB, DIM}, cf_init_normal(0.5f), true);
        loss = cf_nn_linear_cross_entropy(g, x, w, targets);
    } else {
        cf_tensor *logits = cf_graph_param(g, "logits", 2, (int64_t[]){ROWS, VOCAB}, cf_init_normal(1.0f), true);
        loss = cf_nn_cross_entropy(g, logits, targets);
    }
    cf_graph_keep(g, loss);
    cf_error err = {{0}};
    CHECK_MSG(cf_graph_backward(g, loss, &err) == 0, "%s", err.msg);
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (!plan) return;
    cf_plan_init_params(plan, 2);
    fill_ids(cf_tensor_i32(targets), BAD_ROW);
    CHECK(cf_plan_run(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, &err) == -1);
    CHECK_CONTAINS(err.msg, fused ? "linear_cross_entropy (node " : "cross_entropy (node ");
    CHECK_CONTAINS(err.msg, "target id 999 at row 17 of targets is outside the vocabulary of 16");
    fill_ids(cf_tensor_i32(targets), -1);
    cf_tensor_i32(targets)[5] = -100; /* ignore_index stays valid */
    CHECK_MSG(cf_plan_run(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, &err) == 0, "%s", err.msg);
    float l = *cf_tensor_f32(loss);
    CHECK(l > 0.0f && l < 100.0f);
    cf_plan_free(plan);
    cf_graph_free(g);
}

/* A custom op whose kernel fails on the pool's last thread: a worker when there are two. */
static int last_infer(cf_node *n, cf_error *err) {
    (void)err;
    cf_node_output_like(n, 0, n->inputs[0]);
    return 0;
}
static void last_team(void *ctx, int thread, int n_threads) {
    const cf_node *n = ctx;
    if (thread == n_threads - 1 && *cf_tensor_f32(n->inputs[0]) < 0)
        cf_kernel_fail("value %g on thread %d of %d", (double)*cf_tensor_f32(n->inputs[0]), thread, n_threads);
}
static void last_forward(const cf_node *n) { cf_parallel_team(last_team, (void *)n); }
static const cf_op_def fail_on_last = {.name = "test_fail_on_last_thread", .n_outputs = 1, .infer = last_infer,
                                       .kernels[CF_BACKEND_CPU] = last_forward};

static void check_worker_thread(int threads) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 1, (int64_t[]){1});
    cf_node *n = cf_graph_node_add(g, &fail_on_last, &x, 1, NULL);
    CHECK(n != NULL);
    cf_error err = {{0}};
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (!plan) return;
    *cf_tensor_f32(x) = -3.0f;
    CHECK(cf_plan_run(plan, CF_PHASE_FORWARD, &err) == -1);
    char want[128];
    snprintf(want, sizeof want, "test_fail_on_last_thread (node 0): value -3 on thread %d of %d", threads - 1, threads);
    CHECK_CONTAINS(err.msg, want);
    *cf_tensor_f32(x) = 3.0f;
    CHECK(cf_plan_run(plan, CF_PHASE_FORWARD, &err) == 0);
    cf_plan_free(plan);
    cf_graph_free(g);
}

/* The kernels column: an op without a CPU kernel is refused at registration and at plan
 * time. */
static void check_backend_column(void) {
    static const cf_op_def no_kernel = {.name = "test_no_kernel", .n_outputs = 1, .infer = last_infer};
    cf_error err = {{0}};
    CHECK(cf_op_register(&no_kernel, &err) == -1);
    CHECK_CONTAINS(err.msg, "test_no_kernel: infer and the CPU kernel");
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 1, (int64_t[]){1});
    cf_graph_node_add(g, &no_kernel, &x, 1, NULL);
    CHECK(cf_plan_create(g, &err) == NULL);
    CHECK_CONTAINS(err.msg, "op test_no_kernel (node 0) has no CPU kernel");
    cf_graph_free(g);
}

/* ASan would report the 8 EiB request as an error of its own instead of returning NULL. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

/* 4 EiB of input and 4 of output: no machine has them, whatever its overcommit policy. */
static void check_plan_out_of_memory(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 2, (int64_t[]){(int64_t)1 << 30, (int64_t)1 << 30});
    cf_graph_keep(g, cf_nn_scale(g, x, 2.0f));
    cf_error err = {{0}};
    CHECK(cf_graph_error(g, &err) == 0);
    CHECK(cf_plan_create(g, &err) == NULL);
    CHECK_CONTAINS(err.msg, "memory plan: out of memory for the arena (0 bytes), inputs (9223372036854775808)");
    cf_graph_free(g);
}

int main(void) {
    for (int threads = 1; threads <= 2; threads++) {
        cf_set_num_threads(threads, NULL);
        check_embedding();
        check_cross_entropy(false);
        check_cross_entropy(true);
        check_worker_thread(threads);
    }
    check_backend_column();
    check_plan_out_of_memory();
    return test_finish();
}
