/* Memory planner: every arena tensor gets storage that no tensor live at the same time
 * shares, and on small transformer training graphs (forward + backward + AdamW) the
 * arena stays within 3% of the lower bound (peak of simultaneously live bytes). */
#include <stdint.h>

#include "cformers/graph.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "core/passes.h"
#include "test_util.h"

typedef struct span {
    const char *base;
    size_t bytes;
    int first, last;
    const char *name;
} span;

static bool in_arena(const cf_tensor *t) {
    return t->role == CF_ROLE_ACTIVATION && t->producer && !t->keep && !t->view_of;
}

static cf_tensor *root_of(cf_tensor *t) { return t->view_of ? t->view_of : t; }

/* Liveness recomputed here, independently of the planner: producer to last reader. An
 * output computed in place (it asked, and has its input's data pointer) continues its
 * input's span. */
static int collect_spans(cf_graph *g, span *spans) {
    int n = 0;
    int *span_of = calloc((size_t)cf_graph_num_tensors(g), sizeof *span_of);
    for (int i = 0; i < cf_graph_num_tensors(g); i++) span_of[i] = -1;
    for (int k = 0; k < cf_graph_num_nodes(g); k++) {
        cf_node *node = cf_graph_node(g, k);
        for (int i = 0; i < node->n_inputs; i++) {
            int s = span_of[root_of(node->inputs[i])->id];
            if (s >= 0 && spans[s].last < k) spans[s].last = k;
        }
        for (int o = 0; o < node->n_outputs; o++) {
            cf_tensor *t = node->outputs[o];
            if (!in_arena(t)) continue;
            if ((node->in_place >> o & 1u) && o < node->n_inputs && node->inputs[o]->data == t->data)
                span_of[t->id] = span_of[root_of(node->inputs[o])->id];
            else
                spans[span_of[t->id] = n++] = (span){t->data, cf_tensor_bytes(t), k, k, t->name};
        }
    }
    free(span_of);
    return n;
}

static void check_no_overlap(cf_graph *g, const char *what) {
    span *spans = malloc(sizeof *spans * (size_t)cf_graph_num_tensors(g));
    int n = collect_spans(g, spans), bad = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const span *a = &spans[i], *b = &spans[j];
            bool live_together = a->first <= b->last && b->first <= a->last;
            bool share = a->base < b->base + b->bytes && b->base < a->base + a->bytes;
            if (live_together && share && bad++ < 5) fprintf(stderr, "%s: %s and %s overlap\n", what, a->name, b->name);
        }
    CHECK_MSG(bad == 0, "%s: %d overlapping pairs", what, bad);
    free(spans);
}

/* ctx: the fusion passes to run first (NULL: none). */
static void plan_training_graph(cf_model_config *cfg, const cf_context_config *ctx, int64_t batch, int64_t seq,
                                const char *what) {
    cf_model_graph m;
    cf_error err = {{0}};
    CHECK_MSG(cf_model_graph_build(cfg, batch, seq, NULL, &m, &err) == 0, "%s: %s", what, err.msg);
    if (!m.graph) return;
    if (ctx) CHECK_MSG(cf_graph_fuse(m.graph, ctx, &err) == 0, "%s: %s", what, err.msg);
    cf_tensor *lr = cf_graph_input(m.graph, "lr", CF_F32, 0, NULL);
    cf_adamw_config adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    CHECK(cf_graph_backward(m.graph, m.loss, &err) == 0);
    CHECK(cf_graph_adamw(m.graph, &adamw, lr) != NULL);

    cf_memory_report dry;
    CHECK_MSG(cf_graph_plan_memory(m.graph, &dry, &err) == 0, "%s", err.msg);
    cf_plan *plan = cf_plan_create(m.graph, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (plan) {
        const cf_memory_report *r = cf_plan_memory(plan);
        char line[256];
        cf_memory_report_format(r, line, sizeof line);
        printf("%s (B=%lld T=%lld, %d nodes): %s\n", what, (long long)batch, (long long)seq,
               cf_graph_num_nodes(m.graph), line);
        printf("  arena %zu bytes, lower bound %zu bytes, fragmentation %.3f%%\n", r->arena_bytes,
               r->lower_bound_bytes, 100.0 * r->fragmentation);
        CHECK(dry.arena_bytes == r->arena_bytes && dry.lower_bound_bytes == r->lower_bound_bytes);
        cf_memory_report whole;
        CHECK_MSG(cf_model_graph_memory(cfg, ctx, NULL, batch, seq, &whole, &err) == 0, "%s", err.msg);
        CHECK(whole.arena_bytes == r->arena_bytes && whole.param_bytes == r->param_bytes);
        CHECK(r->arena_bytes >= r->lower_bound_bytes);
        CHECK_MSG(r->fragmentation < 0.03, "%s: fragmentation %.2f%%", what, 100.0 * r->fragmentation);
        check_no_overlap(m.graph, what);
        cf_plan_free(plan);
    }
    cf_graph_free(m.graph);
}

static cf_model_config small_llama(void) {
    return (cf_model_config){.arch = CF_ARCH_LLAMA, .vocab_size = 512, .hidden_size = 128, .num_layers = 4,
                             .num_heads = 4, .num_kv_heads = 2, .intermediate_size = 344,
                             .max_position_embeddings = 256, .rope_theta = 10000.0, .rms_norm_eps = 1e-5,
                             .initializer_range = 0.02};
}

/* A chain whose optimum is known: y_i = scale(y_{i-1}) needs two buffers at a time. */
static void plan_chain(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 1, (int64_t[]){1024});
    for (int i = 0; i < 10; i++) x = cf_nn_scale(g, x, 2.0f);
    cf_graph_keep(g, x);
    cf_memory_report r;
    cf_error err;
    CHECK(cf_graph_plan_memory(g, &r, &err) == 0);
    CHECK(r.arena_bytes == 2 * 4096 && r.lower_bound_bytes == 2 * 4096 && r.fragmentation == 0.0);
    cf_graph_free(g);
}

/* Several arenas (cf_plan_set_arenas, a pipeline stage's 1F1B): each holds its own run's
 * intermediates, and binding one again finds them as that run left them. */
static void plan_arenas(void) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 1, (int64_t[]){256});
    cf_tensor *mid = cf_nn_scale(g, x, 2.0f), *y = cf_nn_scale(g, mid, 3.0f);
    cf_graph_keep(g, y);
    cf_error err = {{0}};
    cf_plan *p = cf_plan_create(g, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    if (!p) return;
    CHECK(cf_plan_set_arenas(p, 3, &err) == 0);
    CHECK(cf_plan_set_arenas(p, 2, &err) != 0); /* once */
    const float *bound[3];
    for (int a = 0; a < 3; a++) {
        cf_plan_use_arena(p, a);
        bound[a] = cf_tensor_f32(mid);
        for (int i = 0; i < 256; i++) cf_tensor_f32(x)[i] = (float)(a + 1);
        CHECK(cf_plan_run(p, CF_PHASE_FORWARD, &err) == 0);
        CHECK(cf_tensor_f32(y)[255] == 6.0f * (float)(a + 1));
    }
    CHECK(bound[0] != bound[1] && bound[1] != bound[2] && bound[0] != bound[2]);
    for (int a = 2; a >= 0; a--) {
        cf_plan_use_arena(p, a);
        CHECK(cf_tensor_f32(mid) == bound[a]);
        CHECK_MSG(cf_tensor_f32(mid)[7] == 2.0f * (float)(a + 1), "arena %d holds %g", a, cf_tensor_f32(mid)[7]);
    }
    cf_plan_free(p);
    cf_graph_free(g);
}

/* In place (cf_op_def.in_place): rope asks for its input's storage (cf_node.in_place);
 * the planner grants it only when the input is an arena intermediate that nothing reads
 * afterwards. */
enum in_place_case { DEAD_AFTER, VIEW_DEAD_AFTER, NOT_ASKED, READ_LATER, READ_BY_BACKWARD, GRAPH_INPUT };

static void plan_in_place(enum in_place_case c, const char *what) {
    cf_graph *g = cf_graph_create();
    int64_t shape[4] = {1, 4, 2, 8}, flat[3] = {1, 4, 16};
    cf_rope_config rc = {.head_dim = 8, .max_positions = 4, .theta = 10000.0};
    cf_tensor *table = cf_nn_rope_table(g, &rc);
    cf_tensor *p = cf_graph_param(g, "p", 4, shape, cf_init_ones(), false);
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 4, shape), *a, *rope_in, *m = NULL;
    if (c == VIEW_DEAD_AFTER) {
        a = cf_nn_scale(g, cf_graph_input(g, "x_flat", CF_F32, 3, flat), 2.0f);
        rope_in = cf_nn_reshape(g, a, 4, shape);
    } else {
        a = c == GRAPH_INPUT ? x : cf_nn_scale(g, c == READ_BY_BACKWARD ? p : x, 2.0f);
        rope_in = a;
    }
    if (c == READ_BY_BACKWARD) m = cf_nn_mul(g, a, p); /* before the rope; its backward reads a */
    cf_tensor *y = cf_nn_rope(g, rope_in, table);
    y->producer->in_place = c == NOT_ASKED ? 0u : 1u;
    cf_tensor *out = c == READ_LATER ? cf_nn_add(g, y, a) : m ? cf_nn_add(g, m, y) : cf_nn_scale(g, y, 1.0f);
    cf_error err = {{0}};
    if (c == READ_BY_BACKWARD)
        CHECK(cf_graph_backward_from(g, out, cf_graph_input(g, "dy", CF_F32, 4, shape), &err) == 0);
    cf_graph_keep(g, out);
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s: %s", what, err.msg);
    if (plan) {
        bool granted = y->data == a->data, want = c == DEAD_AFTER || c == VIEW_DEAD_AFTER;
        size_t arena = cf_plan_memory(plan)->arena_bytes, buffer = 4 * 16 * sizeof(float);
        CHECK_MSG(granted == want, "%s: in place %d, expected %d", what, granted, want);
        if (c == DEAD_AFTER || c == NOT_ASKED) /* the rope is the peak: a and y, or a alone */
            CHECK_MSG(arena == (want ? 1 : 2) * buffer, "%s: arena %zu bytes", what, arena);
        printf("in place, %s: %s, arena %zu bytes\n", what, granted ? "granted" : "refused", arena);
        cf_plan_free(plan);
    }
    cf_graph_free(g);
}

/* A two-output op that declares only output 1 in place: (a, b) -> (2a, 3b). */
static int pair_infer(cf_node *n, cf_error *err) {
    (void)err;
    cf_node_output_like(n, 0, n->inputs[0]);
    cf_node_output_like(n, 1, n->inputs[1]);
    return 0;
}

static void pair_forward(const cf_node *n) {
    for (int k = 0; k < 2; k++)
        for (int64_t i = 0; i < cf_tensor_numel(n->inputs[k]); i++)
            cf_tensor_f32(n->outputs[k])[i] = (float)(k + 2) * cf_tensor_f32(n->inputs[k])[i];
}

static const cf_op_def pair_op = {.name = "test_pair", .n_outputs = 2, .infer = pair_infer,
                                  .kernels[CF_BACKEND_CPU] = pair_forward, .in_place = 2u};

/* Output k over input k, for the outputs the op declares: asking for output 1 grants
 * it, asking for output 0 (not declared) grants nothing. */
static void plan_in_place_second_output(unsigned ask) {
    cf_graph *g = cf_graph_create();
    cf_tensor *x = cf_graph_input(g, "x", CF_F32, 1, (int64_t[]){16});
    cf_tensor *in[2] = {cf_nn_scale(g, x, 1.0f), cf_nn_scale(g, x, 1.0f)};
    cf_node *n = cf_graph_node_add(g, &pair_op, in, 2, NULL);
    CHECK(n != NULL);
    if (!n) {
        cf_graph_free(g);
        return;
    }
    n->in_place = ask;
    cf_graph_keep(g, cf_nn_add(g, n->outputs[0], n->outputs[1]));
    cf_error err = {{0}};
    cf_plan *plan = cf_plan_create(g, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (plan) {
        CHECK(n->outputs[0]->data != in[0]->data && (n->outputs[1]->data == in[1]->data) == (ask == 2u));
        for (int i = 0; i < 16; i++) cf_tensor_f32(x)[i] = (float)i;
        CHECK(cf_plan_run(plan, CF_PHASE_ALL, NULL) == 0);
        CHECK(cf_tensor_f32(n->outputs[1])[5] == 15.0f && cf_tensor_f32(n->outputs[0])[5] == 10.0f);
        cf_plan_free(plan);
    }
    cf_graph_free(g);
}

int main(void) {
    plan_chain();
    plan_arenas();
    plan_in_place_second_output(2u);
    plan_in_place_second_output(1u);
    plan_in_place(DEAD_AFTER, "input dead after the rope");
    plan_in_place(VIEW_DEAD_AFTER, "input a view, dead after");
    plan_in_place(NOT_ASKED, "not asked for");
    plan_in_place(READ_LATER, "input read by a later node");
    plan_in_place(READ_BY_BACKWARD, "input read by the backward");
    plan_in_place(GRAPH_INPUT, "input a graph input");
    cf_model_config llama = small_llama();
    plan_training_graph(&llama, NULL, 4, 64, "llama d128 L4 GQA");
    cf_context_config fused = {.enable_graph_kernel = true, .fuse_residual_norm = true, .fuse_rope = true,
                               .fuse_cross_entropy = true};
    plan_training_graph(&llama, &fused, 4, 64, "llama d128 L4 GQA, fused, rope in place");
    llama.tie_word_embeddings = true;
    llama.hidden_size = 64;
    llama.num_layers = 2;
    llama.intermediate_size = 172;
    plan_training_graph(&llama, NULL, 4, 64, "llama d64 L2 tied");
    cf_model_config gpt2 = small_llama();
    gpt2.arch = CF_ARCH_GPT2;
    gpt2.num_kv_heads = gpt2.num_heads;
    gpt2.intermediate_size = 4 * gpt2.hidden_size;
    gpt2.tie_word_embeddings = true;
    plan_training_graph(&gpt2, NULL, 4, 64, "gpt2 d128 L4");
    plan_training_graph(&gpt2, &fused, 4, 64, "gpt2 d128 L4, fused");
    return test_finish();
}
