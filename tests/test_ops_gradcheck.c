/* Every differentiable built-in op: analytic gradients (autodiff + backward kernels)
 * against central finite differences accumulated in f64 (cformers/gradcheck.h).
 * Runs on every ISA path the machine supports. */
#include <stdint.h>

#include "cformers/cpu.h"
#include "cformers/gradcheck.h"
#include "cformers/graph.h"
#include "kernels/graph_ops.h"
#include "test_util.h"

typedef struct case_ctx {
    int32_t vocab;  /* i32 inputs get ids in [0, vocab) */
    bool ignore_one; /* and the last id of "targets" becomes -1 */
} case_ctx;

static int fill_ids(cf_tensor *t, void *arg) {
    const case_ctx *c = arg;
    if (t->dtype != CF_I32) return 0;
    int32_t *ids = cf_tensor_i32(t);
    int64_t n = cf_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7 + 3) % c->vocab);
    if (c->ignore_one && strcmp(t->name, "targets") == 0) ids[n - 1] = -1;
    return 1;
}

static void run_check(const char *what, cf_graph *g, cf_tensor *y, case_ctx *ctx) {
    /* Observed errors are around 1e-5; the margin is 5x-50x. */
    cf_gradcheck_opts opts = {.seed = 42, .tol_abs = 5e-4, .tol_rel = 5e-3, .fill = fill_ids, .fill_ctx = ctx};
    cf_gradcheck_result res = {0};
    cf_error err = {{0}};
    int rc = y ? cf_gradcheck(g, y, &opts, &res, &err) : cf_graph_error(g, &err);
    CHECK_MSG(rc == 0, "%s: %s", what, err.msg);
    CHECK_MSG(res.checked > 0, "%s: nothing checked", what);
    printf("  %-28s %5ld elements, max abs err %.2e, max rel err %.2e\n", what, res.checked, res.max_abs_err,
           res.max_rel_err);
    cf_graph_free(g);
}

static cf_tensor *param(cf_graph *g, const char *name, int ndim, const int64_t *shape) {
    return cf_graph_param(g, name, ndim, shape, cf_init_zeros(), true);
}

#define SHAPE(...) ((int64_t[]){__VA_ARGS__})

typedef cf_tensor *(*binary_fn)(cf_graph *, cf_tensor *, cf_tensor *);

/* fn(a, b) with a and b parameters of shape [3, 7]. */
static void check_binary(const char *what, binary_fn fn) {
    case_ctx ctx = {.vocab = 1};
    cf_graph *g = cf_graph_create();
    cf_tensor *a = param(g, "a", 2, SHAPE(3, 7)), *b = param(g, "b", 2, SHAPE(3, 7));
    run_check(what, g, fn(g, a, b), &ctx);
}

static void check_elementwise(void) {
    case_ctx ctx = {.vocab = 1};
    check_binary("add", cf_nn_add);
    check_binary("mul", cf_nn_mul);
    cf_graph *g = cf_graph_create();
    cf_tensor *a = param(g, "a", 2, SHAPE(3, 5)), *b;
    run_check("mul (same tensor twice)", g, cf_nn_mul(g, a, a), &ctx);
    g = cf_graph_create();
    a = param(g, "a", 1, SHAPE(7));
    run_check("scale", g, cf_nn_scale(g, a, -2.5f), &ctx);
    g = cf_graph_create();
    a = param(g, "a", 3, SHAPE(2, 3, 4));
    b = param(g, "b", 2, SHAPE(3, 4));
    run_check("add_broadcast", g, cf_nn_add_broadcast(g, a, b), &ctx);
    g = cf_graph_create();
    a = param(g, "a", 3, SHAPE(2, 3, 4));
    run_check("reshape", g, cf_nn_mul(g, cf_nn_reshape(g, a, 2, SHAPE(6, 4)), cf_nn_reshape(g, a, 2, SHAPE(6, 4))),
              &ctx);
    g = cf_graph_create();
    a = param(g, "a", 2, SHAPE(3, 6));
    cf_tensor *parts[3];
    cf_nn_split(g, a, 3, parts);
    run_check("split (one part unused)", g, cf_nn_add(g, parts[0], cf_nn_mul(g, parts[2], parts[2])), &ctx);
    for (int used = 0; used < 3; used += 2) { /* Phi-3's q/k/v under GQA: q 4 wide, k and v 2; one part used */
        g = cf_graph_create();
        a = param(g, "a", 2, SHAPE(3, 8));
        cf_nn_split_widths(g, a, 3, SHAPE(4, 2, 2), parts);
        run_check(used ? "split widths 4, 2, 2 (v)" : "split widths 4, 2, 2 (q)", g,
                  cf_nn_mul(g, parts[used], parts[used]), &ctx);
    }
}

static void check_matmul(void) {
    case_ctx ctx = {.vocab = 1};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            cf_graph *g = cf_graph_create();
            cf_tensor *a = param(g, "a", 2, ta ? SHAPE(4, 3) : SHAPE(3, 4));
            cf_tensor *b = param(g, "b", 2, tb ? SHAPE(5, 4) : SHAPE(4, 5));
            char what[32];
            snprintf(what, sizeof what, "matmul ta=%d tb=%d", ta, tb);
            run_check(what, g, cf_nn_matmul(g, a, b, ta, tb), &ctx);
        }
    cf_graph *g = cf_graph_create();
    cf_tensor *x = param(g, "x", 3, SHAPE(2, 3, 4)), *w = param(g, "w", 2, SHAPE(5, 4)), *b = param(g, "b", 1, SHAPE(5));
    run_check("linear [2,3,4] x [5,4]^T + b", g, cf_nn_linear(g, x, w, b), &ctx);
}

static void check_embedding(void) {
    case_ctx ctx = {.vocab = 5};
    cf_graph *g = cf_graph_create();
    cf_tensor *w = param(g, "w", 2, SHAPE(5, 3));
    cf_tensor *ids = cf_graph_input(g, "ids", CF_I32, 2, SHAPE(2, 4)); /* 8 ids over 5 rows: repeats */
    run_check("embedding", g, cf_nn_embedding(g, w, ids), &ctx);
}

static void check_norms(void) {
    case_ctx ctx = {.vocab = 1};
    cf_graph *g = cf_graph_create();
    cf_tensor *x = param(g, "x", 3, SHAPE(2, 3, 8)), *w = param(g, "w", 1, SHAPE(8));
    run_check("rmsnorm", g, cf_nn_rmsnorm(g, x, w, 1e-5f), &ctx);
    g = cf_graph_create(); /* Qwen3's q/k norm: each head of [B, T, heads, head_dim] */
    x = param(g, "x", 4, SHAPE(2, 3, 4, 8));
    w = param(g, "w", 1, SHAPE(8));
    run_check("rmsnorm per head (q/k norm)", g, cf_nn_rmsnorm(g, x, w, 1e-6f), &ctx);
    g = cf_graph_create(); /* Gemma's (1 + w) RMSNorm, as the graph builder emits it */
    x = param(g, "x", 3, SHAPE(2, 3, 8));
    w = param(g, "w", 1, SHAPE(8));
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    cf_tensor *one = cf_graph_const(g, "ones", CF_F32, 1, SHAPE(8), ones);
    run_check("rmsnorm (1 + w)", g, cf_nn_rmsnorm(g, x, cf_nn_add(g, w, one), 1e-6f), &ctx);
    g = cf_graph_create();
    x = param(g, "x", 2, SHAPE(40, 6)); /* more rows than reduction chunks */
    w = param(g, "w", 1, SHAPE(6));
    cf_tensor *b = param(g, "b", 1, SHAPE(6));
    run_check("layernorm", g, cf_nn_layernorm(g, x, w, b, 1e-5f), &ctx);
}

static void check_rope(double scaling) {
    case_ctx ctx = {.vocab = 1};
    cf_graph *g = cf_graph_create();
    cf_tensor *x = param(g, "x", 4, SHAPE(2, 5, 2, 8));
    cf_rope_config rc = {.head_dim = 8, .max_positions = 6, .theta = 10000.0, .scaling_factor = scaling,
                         .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position = 4};
    run_check(scaling > 1 ? "rope (llama3 scaling)" : "rope", g, cf_nn_rope(g, x, cf_nn_rope_table(g, &rc)), &ctx);
    g = cf_graph_create(); /* NEOX halves (Qwen2): pairs (i, i + head_dim/2) */
    x = param(g, "x", 4, SHAPE(2, 5, 2, 8));
    run_check(scaling > 1 ? "rope neox (llama3 scaling)" : "rope neox", g,
              cf_nn_rope_neox(g, x, cf_nn_rope_table(g, &rc)), &ctx);
}

static void check_attention(int heads, int kv_heads) {
    case_ctx ctx = {.vocab = 1};
    cf_graph *g = cf_graph_create();
    cf_tensor *q = param(g, "q", 4, SHAPE(2, 5, heads, 4));
    cf_tensor *k = param(g, "k", 4, SHAPE(2, 5, kv_heads, 4)), *v = param(g, "v", 4, SHAPE(2, 5, kv_heads, 4));
    char what[48];
    snprintf(what, sizeof what, "attention H=%d KV=%d", heads, kv_heads);
    run_check(what, g, cf_nn_attention(g, q, k, v), &ctx);
}

static void check_activations(void) {
    case_ctx ctx = {.vocab = 1};
    check_binary("swiglu", cf_nn_swiglu);
    cf_graph *g = cf_graph_create();
    run_check("gelu", g, cf_nn_gelu(g, param(g, "x", 2, SHAPE(3, 7))), &ctx);
    g = cf_graph_create(); /* Gemma 2's final logits: c tanh(x / c), c small enough to bend the inputs */
    run_check("softcap", g, cf_nn_softcap(g, param(g, "x", 2, SHAPE(3, 7)), 0.5f), &ctx);
    g = cf_graph_create(); /* GeGLU (Gemma): gelu_tanh(gate) * up */
    cf_tensor *gate = param(g, "gate", 2, SHAPE(3, 7)), *up = param(g, "up", 2, SHAPE(3, 7));
    run_check("geglu", g, cf_nn_mul(g, cf_nn_gelu(g, gate), up), &ctx);
}

static void check_cross_entropy(void) {
    case_ctx ctx = {.vocab = 11, .ignore_one = true};
    cf_graph *g = cf_graph_create();
    cf_tensor *logits = param(g, "logits", 3, SHAPE(2, 3, 11));
    cf_tensor *targets = cf_graph_input(g, "targets", CF_I32, 2, SHAPE(2, 3));
    run_check("cross_entropy (one ignored)", g, cf_nn_cross_entropy(g, logits, targets), &ctx);
}

int main(void) {
    for (int isa = cf_isa_supported(); isa >= CF_ISA_SCALAR; isa--) {
        cf_isa_force((cf_isa)isa);
        printf("ISA %s\n", cf_isa_name((cf_isa)isa));
        check_elementwise();
        check_matmul();
        check_embedding();
        check_norms();
        check_rope(0.0);
        check_rope(8.0);
        check_attention(2, 2);
        check_attention(4, 2);
        check_activations();
        check_cross_entropy();
    }
    return test_finish();
}
