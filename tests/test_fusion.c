/* The fusion passes give the same loss and gradients as the unfused graph.
 *
 * Each case builds the same model twice from one config, once left alone and once
 * rewritten by cf_graph_fuse with one pass (or all) switched on, runs forward + backward on the
 * same weights and tokens (one target ignored), and compares the loss and every
 * parameter's gradient: |fused - unfused| <= 1e-5 + 1e-4 |unfused| (the same products
 * summed in another order). It also checks what the pass is for: fewer nodes, no [tokens, vocab]
 * tensor is left (the arena only shrinks once the tokens outnumber one chunk and the
 * hidden size: see bench/bench_fusion.c for real shapes). The fused op itself is compared with
 * linear + cross_entropy across several token chunks and gradient-checked. */
#include <math.h>
#include <stdint.h>

#include "cformers/fused.h"
#include "cformers/gradcheck.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "core/passes.h"
#include "kernels/fused_ops.h"
#include "graph_test_util.h"
#include "test_util.h"

typedef struct step {
    cf_model_graph m;
    cf_plan *plan;
} step;

enum { BATCH = 2, SEQ = 9 };

static cf_model_config tiny(cf_arch arch) { return graph_test_model(arch, 61, 32, 2, 48, 16, true); }

static step run_step(const cf_model_config *cfg, const cf_context_config *ctx) {
    step s = {0};
    cf_error err = {{0}};
    CHECK_MSG(cf_model_graph_build(cfg, BATCH, SEQ, NULL, &s.m, &err) == 0, "%s", err.msg);
    if (!s.m.graph) return s;
    CHECK_MSG(cf_graph_fuse(s.m.graph, ctx, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_graph_backward(s.m.graph, s.m.loss, &err) == 0, "%s", err.msg);
    s.plan = graph_test_train_step(&s.m, 5, 17, 61);
    if (!s.plan) return s;
    return s;
}

static void release(step *s) {
    cf_plan_free(s->plan);
    cf_graph_free(s->m.graph);
}

static bool close_enough(float got, float want) { return fabsf(got - want) <= 1e-5f + 1e-4f * fabsf(want); }

static void compare_steps(const char *what, const step *fused, const step *plain) {
    float lf = *cf_tensor_f32(fused->m.loss), lp = *cf_tensor_f32(plain->m.loss);
    CHECK_MSG(close_enough(lf, lp), "%s: loss %.7g vs %.7g", what, lf, lp);
    const cf_graph *g = fused->m.graph;
    for (int i = 0; i < cf_graph_num_params(g); i++) {
        const cf_tensor *pf = cf_graph_param_at(g, i), *pp = cf_graph_param_at(plain->m.graph, i);
        const float *a = cf_tensor_f32(pf->grad), *b = cf_tensor_f32(pp->grad);
        for (int64_t e = 0; e < cf_tensor_numel(pf); e++)
            if (!close_enough(a[e], b[e])) {
                CHECK_MSG(false, "%s: grad %s[%lld] %.7g vs %.7g", what, pf->name, (long long)e, a[e], b[e]);
                break;
            }
    }
}

static bool has_logits_sized_tensor(const cf_graph *g, int64_t vocab) {
    for (int i = 0; i < cf_graph_num_tensors(g); i++)
        if (cf_tensor_numel(cf_graph_tensor(g, i)) == BATCH * SEQ * vocab) return true;
    return false;
}

static void check_pass(cf_arch arch, const char *what, const cf_context_config *on) {
    cf_model_config cfg = tiny(arch);
    cf_context_config off = {0};
    step plain = run_step(&cfg, &off), fused = run_step(&cfg, on);
    if (plain.plan && fused.plan) {
        compare_steps(what, &fused, &plain);
        int nodes_fused = cf_graph_num_nodes(fused.m.graph), nodes_plain = cf_graph_num_nodes(plain.m.graph);
        CHECK_MSG(nodes_fused < nodes_plain, "%s: %d nodes, unfused %d", what, nodes_fused, nodes_plain);
        if (on->fuse_cross_entropy)
            CHECK_MSG(!has_logits_sized_tensor(fused.m.graph, cfg.vocab_size), "%s: logits still stored", what);
        size_t a_fused = cf_plan_memory(fused.plan)->arena_bytes, a_plain = cf_plan_memory(plain.plan)->arena_bytes;
        printf("  %-30s loss %.6f, nodes %d -> %d, arena %zu -> %zu bytes\n", what, *cf_tensor_f32(fused.m.loss),
               nodes_plain, nodes_fused, a_plain, a_fused);
    }
    release(&plain);
    release(&fused);
}

static bool same_bits(const cf_tensor *a, const cf_tensor *b) {
    return memcmp(a->data, b->data, cf_tensor_bytes(a)) == 0;
}

/* Rotated tensors (forward q, k and the backward's inverse rotations) that share their
 * input's storage. */
static int ropes_in_place(const cf_graph *g) {
    int n = 0;
    for (int i = 0; i < cf_graph_num_nodes(g); i++) {
        const cf_node *node = cf_graph_node(g, i);
        n += strcmp(node->op->name, "rope") == 0 && node->outputs[0]->data == node->inputs[0]->data;
    }
    return n;
}

/* fuse_rope: the same kernels on other storage, so the loss and every gradient are
 * bit-identical. Every rope is in place: q and k before rotation are dead after it, and
 * so are their gradients after the inverse rotation. The arena is no larger; it is not
 * smaller either, because a training graph's peak of live bytes is never at a rope
 * (attention and its backward, right after, hold more), so the two rope buffers the
 * plan no longer needs were already sharing memory with bigger ones. tests/test_plan.c
 * shows the arena shrinking where a rope is the peak. */
static void check_rope_in_place(const cf_model_config *cfg, const char *what) {
    cf_context_config off = {.enable_graph_kernel = true}, on = {.enable_graph_kernel = true, .fuse_rope = true};
    step plain = run_step(cfg, &off), fused = run_step(cfg, &on);
    if (plain.plan && fused.plan) {
        const cf_graph *g = fused.m.graph;
        CHECK_MSG(same_bits(fused.m.loss, plain.m.loss), "%s: loss differs", what);
        for (int i = 0; i < cf_graph_num_params(g); i++)
            CHECK_MSG(same_bits(cf_graph_param_at(g, i)->grad, cf_graph_param_at(plain.m.graph, i)->grad),
                      "%s: grad %s differs", what, cf_graph_param_at(g, i)->name);
        int ropes = 4 * (int)cfg->num_layers; /* q, k; forward and backward */
        CHECK_MSG(ropes_in_place(g) == ropes, "%s: %d of %d ropes in place", what, ropes_in_place(g), ropes);
        CHECK(ropes_in_place(plain.m.graph) == 0);
        size_t a_fused = cf_plan_memory(fused.plan)->arena_bytes, a_plain = cf_plan_memory(plain.plan)->arena_bytes;
        CHECK_MSG(a_fused <= a_plain, "%s: arena %zu, not in place %zu", what, a_fused, a_plain);
        printf("  %-30s loss %.6f, arena %zu -> %zu bytes\n", what, *cf_tensor_f32(fused.m.loss), a_plain, a_fused);
    }
    release(&plain);
    release(&fused);
}

/* Switches off: the graph is left exactly as built. */
static void check_switches_off(void) {
    cf_model_config cfg = tiny(CF_ARCH_LLAMA);
    /* enable_graph_kernel off (MindFormers' usual setting) turns off residual + norm only. */
    cf_context_config master_off = {.enable_graph_kernel = false, .fuse_residual_norm = true};
    cf_model_graph m;
    cf_error err = {{0}};
    CHECK(cf_model_graph_build(&cfg, BATCH, SEQ, NULL, &m, &err) == 0);
    int nodes = cf_graph_num_nodes(m.graph);
    CHECK(cf_graph_fuse(m.graph, &master_off, &err) == 0 && cf_graph_num_nodes(m.graph) == nodes);
    CHECK(cf_graph_backward(m.graph, m.loss, &err) == 0);
    cf_context_config on = {.enable_graph_kernel = true, .fuse_cross_entropy = true};
    CHECK(cf_graph_fuse(m.graph, &on, &err) != 0);
    CHECK_CONTAINS(err.msg, "before the backward");
    cf_graph_free(m.graph);
}

/* The op over several chunks of tokens (128, 128 and 44), against linear + cross_entropy. */
static void check_op_chunks(void) {
    enum { ROWS = 300, DIM = 8, VOCAB = 13, CHUNK = 128 };
    float loss[2];
    float grads[2][(ROWS + VOCAB) * DIM];
    for (int fused = 0; fused < 2; fused++) {
        cf_graph *g = cf_graph_create();
        cf_tensor *x = cf_graph_param(g, "x", 2, (int64_t[]){ROWS, DIM}, cf_init_normal(1.0f), false);
        cf_tensor *w = cf_graph_param(g, "w", 2, (int64_t[]){VOCAB, DIM}, cf_init_normal(1.0f), false);
        cf_tensor *t = cf_graph_input(g, "targets", CF_I32, 1, (int64_t[]){ROWS});
        cf_tensor *l = fused ? cf_nn_linear_cross_entropy_chunked(g, x, w, t, CHUNK)
                             : cf_nn_cross_entropy(g, cf_nn_linear(g, x, w, NULL), t);
        cf_graph_keep(g, l);
        cf_error err = {{0}};
        CHECK_MSG(cf_graph_backward(g, l, &err) == 0, "%s", err.msg);
        cf_plan *p = cf_plan_create(g, &err);
        CHECK_MSG(p != NULL, "%s", err.msg);
        if (p) {
            cf_plan_init_params(p, 9);
            for (int r = 0; r < ROWS; r++) cf_tensor_i32(t)[r] = r % 7 == 3 ? -1 : (r * 5) % VOCAB;
            CHECK(cf_plan_run(p, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
            loss[fused] = *cf_tensor_f32(l);
            memcpy(grads[fused], cf_tensor_f32(x->grad), sizeof(float) * ROWS * DIM);
            memcpy(grads[fused] + ROWS * DIM, cf_tensor_f32(w->grad), sizeof(float) * VOCAB * DIM);
        }
        cf_plan_free(p);
        cf_graph_free(g);
    }
    CHECK_MSG(close_enough(loss[1], loss[0]), "chunked loss %.7g vs %.7g", loss[1], loss[0]);
    for (int i = 0; i < (ROWS + VOCAB) * DIM; i++)
        if (!close_enough(grads[1][i], grads[0][i])) {
            CHECK_MSG(false, "chunked grad %d: %.7g vs %.7g", i, grads[1][i], grads[0][i]);
            break;
        }
}

static int fill_targets(cf_tensor *t, void *ctx) {
    (void)ctx;
    if (t->dtype != CF_I32) return 0;
    for (int64_t i = 0; i < cf_tensor_numel(t); i++) cf_tensor_i32(t)[i] = i == 2 ? -1 : (int32_t)(i * 3 % 11);
    return 1;
}

static void gradcheck_op(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_param(g, "x", 3, (int64_t[]){2, 3, 5}, cf_init_zeros(), false);
    cf_tensor *w = cf_graph_param(g, "w", 2, (int64_t[]){11, 5}, cf_init_zeros(), false);
    cf_tensor *t = cf_graph_input(g, "targets", CF_I32, 2, (int64_t[]){2, 3});
    cf_gradcheck_opts opts = {.seed = 3, .fill = fill_targets};
    cf_error err = {{0}};
    CHECK_MSG(cf_gradcheck(g, cf_nn_linear_cross_entropy(g, x, w, t), &opts, NULL, &err) == 0, "gradcheck: %s",
              err.msg);
    cf_graph_free(g);
}

/* add -> norm fused, with the sum also read elsewhere (as the residual stream is), so
 * both of the fused op's gradient paths are checked. */
static void gradcheck_add_norm(bool layer) {
    cf_graph *g = cf_graph_create();
    int64_t shape[3] = {2, 3, 6}, d[1] = {6};
    cf_tensor *x = cf_graph_param(g, "x", 3, shape, cf_init_zeros(), false);
    cf_tensor *r = cf_graph_param(g, "r", 3, shape, cf_init_zeros(), false);
    cf_tensor *w = cf_graph_param(g, "w", 1, d, cf_init_zeros(), false);
    cf_tensor *h = cf_nn_add(g, x, r), *y;
    if (layer)
        y = cf_nn_layernorm(g, h, w, cf_graph_param(g, "b", 1, d, cf_init_zeros(), false), 1e-5f);
    else
        y = cf_nn_rmsnorm(g, h, w, 1e-5f);
    cf_tensor *out = cf_nn_mul(g, h, y);
    CHECK(cf_pass_fuse_residual_norm(g) == 1 && cf_graph_num_nodes(g) == 2);
    cf_gradcheck_opts opts = {.seed = 6};
    cf_error err = {{0}};
    CHECK_MSG(cf_gradcheck(g, out, &opts, NULL, &err) == 0, "gradcheck add_%s: %s", layer ? "layernorm" : "rmsnorm",
              err.msg);
    cf_graph_free(g);
}

/* Three projections of x combined, the third unused (no gradient reaches it). */
static void gradcheck_combined(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_param(g, "x", 3, (int64_t[]){2, 3, 4}, cf_init_zeros(), false);
    cf_tensor *w[3];
    for (int i = 0; i < 3; i++)
        w[i] = cf_graph_param(g, i == 0 ? "w0" : i == 1 ? "w1" : "w2", 2, (int64_t[]){i == 2 ? 8 : 4, 4},
                              cf_init_zeros(), false);
    cf_tensor *y0 = cf_nn_linear(g, x, w[0], NULL), *y1 = cf_nn_linear(g, x, w[1], NULL);
    cf_nn_linear(g, x, w[2], NULL);
    cf_tensor *y = cf_nn_mul(g, y0, y1);
    CHECK(cf_pass_matrix_combine(g, 0) == 1 && cf_graph_num_nodes(g) == 2);
    cf_gradcheck_opts opts = {.seed = 4};
    cf_error err = {{0}};
    CHECK_MSG(cf_gradcheck(g, y, &opts, NULL, &err) == 0, "gradcheck combined: %s", err.msg);
    cf_graph_free(g);
}

int main(void) {
    cf_context_config ce = {.enable_graph_kernel = true, .fuse_cross_entropy = true};
    cf_context_config combine = {.enable_graph_kernel = true, .enable_matrix_combine = true};
    cf_context_config norm = {.enable_graph_kernel = true, .fuse_residual_norm = true};
    cf_context_config all = {.enable_graph_kernel = true, .enable_matrix_combine = true, .fuse_residual_norm = true,
                             .fuse_cross_entropy = true, .fuse_rope = true};
    check_pass(CF_ARCH_LLAMA, "llama fuse_cross_entropy", &ce);
    check_pass(CF_ARCH_GPT2, "gpt2 fuse_cross_entropy", &ce);
    check_pass(CF_ARCH_LLAMA, "llama matrix_combine (GQA)", &combine);
    check_pass(CF_ARCH_LLAMA, "llama fuse_residual_norm", &norm);
    check_pass(CF_ARCH_GPT2, "gpt2 fuse_residual_norm", &norm);
    check_pass(CF_ARCH_LLAMA, "llama all passes", &all);
    check_pass(CF_ARCH_GPT2, "gpt2 all passes", &all);
    cf_model_config llama = tiny(CF_ARCH_LLAMA);
    check_rope_in_place(&llama, "llama fuse_rope (flash)");
    llama.use_flash_attention = false;
    check_rope_in_place(&llama, "llama fuse_rope (unfused attn)");
    check_switches_off();
    check_op_chunks();
    gradcheck_op();
    gradcheck_combined();
    gradcheck_add_norm(false);
    gradcheck_add_norm(true);
    return test_finish();
}
