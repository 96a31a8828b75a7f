/* Executor: training steps on tiny LLaMA and GPT-2 graphs lower the loss on a fixed
 * batch; steps after the first allocate nothing (malloc & friends are counted here);
 * phases do what they say (forward leaves weights alone, backward accumulates, the
 * update applies AdamW and clears gradients); denormals count as zero inside a run;
 * runs are reproducible. */
#include <immintrin.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#include "cformers/graph.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "cformers/rng.h"
#include "cformers/threads.h"
#include "test_util.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#endif

static atomic_long allocations;
static atomic_bool counting;

#ifndef UNDER_ASAN
/* Interpose the allocator for this executable (ASan owns malloc in sanitizer builds). */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static void count(void) {
    if (atomic_load_explicit(&counting, memory_order_relaxed)) atomic_fetch_add(&allocations, 1);
}
void *malloc(size_t n) {
    count();
    return __libc_malloc(n);
}
void *calloc(size_t n, size_t size) {
    count();
    return __libc_calloc(n, size);
}
void *realloc(void *p, size_t n) {
    count();
    return __libc_realloc(p, n);
}
void *aligned_alloc(size_t align, size_t n) {
    count();
    return __libc_memalign(align, n);
}
#endif

typedef struct trainer {
    cf_model_graph m;
    cf_plan *plan;
    cf_tensor *lr, *grad_norm;
} trainer;

static cf_model_config tiny(cf_arch arch) {
    cf_model_config c = {.arch = arch, .vocab_size = 64, .hidden_size = 32, .num_layers = 2, .num_heads = 4,
                         .num_kv_heads = arch == CF_ARCH_LLAMA ? 2 : 4, .intermediate_size = 64,
                         .max_position_embeddings = 32, .rope_theta = 10000.0, .rms_norm_eps = 1e-5,
                         .initializer_range = 0.02, .tie_word_embeddings = arch == CF_ARCH_GPT2};
    return c;
}

static int setup(trainer *t, const cf_model_config *cfg, int64_t batch, int64_t seq) {
    cf_error err = {{0}};
    if (cf_model_graph_build(cfg, batch, seq, NULL, &t->m, &err) != 0) {
        fprintf(stderr, "build: %s\n", err.msg);
        return -1;
    }
    cf_graph *g = t->m.graph;
    t->lr = cf_graph_input(g, "lr", CF_F32, 0, NULL);
    cf_adamw_config adamw = {.beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.01f, .max_grad_norm = 1.0f};
    if (cf_graph_backward(g, t->m.loss, &err) != 0 || !(t->grad_norm = cf_graph_adamw(g, &adamw, t->lr)) ||
        !(t->plan = cf_plan_create(g, &err))) {
        fprintf(stderr, "setup: %s\n", err.msg);
        cf_graph_free(g);
        return -1;
    }
    cf_plan_init_params(t->plan, 1234);
    /* A fixed batch: the model can memorise it. */
    cf_rng rng;
    cf_rng_seed(&rng, 7);
    int32_t *tok = cf_tensor_i32(t->m.tokens), *tgt = cf_tensor_i32(t->m.targets);
    for (int64_t i = 0; i < batch * seq; i++) tok[i] = (int32_t)cf_rng_below(&rng, (uint64_t)cfg->vocab_size);
    for (int64_t i = 0; i < batch * seq; i++) tgt[i] = (i + 1) % seq ? tok[i + 1] : 0;
    *cf_tensor_f32(t->lr) = 1e-2f;
    return 0;
}

static void teardown(trainer *t) {
    cf_plan_free(t->plan);
    cf_graph_free(t->m.graph);
}

static float loss_of(const trainer *t) { return *cf_tensor_f32(t->m.loss); }

static void check_training(cf_arch arch, const char *what) {
    cf_model_config cfg = tiny(arch);
    trainer t;
    if (setup(&t, &cfg, 2, 16)) {
        CHECK_MSG(0, "%s: setup failed", what);
        return;
    }
    float first = 0.0f, last = 0.0f;
    long allocs_after_first = 0;
    for (int step = 0; step < 12; step++) {
        atomic_store(&allocations, 0);
        atomic_store(&counting, step > 0);
        CHECK(cf_plan_run(t.plan, CF_PHASE_ALL, NULL) == 0);
        atomic_store(&counting, false);
        allocs_after_first += atomic_load(&allocations);
        if (step == 0) first = loss_of(&t);
        last = loss_of(&t);
    }
    printf("%s: loss %.4f -> %.4f over 12 steps (ln V = %.4f), grad norm %.4f\n", what, first, last,
           log((double)cfg.vocab_size), *cf_tensor_f32(t.grad_norm));
    CHECK_NEAR(first, log((double)cfg.vocab_size), 0.1);
    CHECK_MSG(last < first - 0.5f, "%s: loss %.4f -> %.4f", what, first, last);
    const char *sanitized = getenv("CFORMERS_SANITIZED");
    if (!(sanitized && *sanitized == '1')) CHECK_MSG(allocs_after_first == 0, "%s: %ld allocations", what, allocs_after_first);
    CHECK(*cf_tensor_i32(cf_graph_blocks(t.m.graph).step) == 12);
    teardown(&t);
}

/* forward alone leaves weights alone; two backward passes accumulate twice the
 * gradient; the update clears it. */
static void check_phases(void) {
    cf_model_config cfg = tiny(CF_ARCH_LLAMA);
    trainer t;
    if (setup(&t, &cfg, 1, 8)) return;
    cf_param_blocks b = cf_graph_blocks(t.m.graph);
    int64_t n = cf_graph_param_elems(t.m.graph);
    float *params = cf_tensor_f32(b.params), *grads = cf_tensor_f32(b.grads);
    float *before = malloc(sizeof(float) * (size_t)n), *once = malloc(sizeof(float) * (size_t)n);
    memcpy(before, params, sizeof(float) * (size_t)n);
    CHECK(cf_plan_run(t.plan, CF_PHASE_FORWARD, NULL) == 0);
    CHECK(memcmp(before, params, sizeof(float) * (size_t)n) == 0);
    CHECK(cf_plan_run(t.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
    memcpy(once, grads, sizeof(float) * (size_t)n);
    CHECK(cf_plan_run(t.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
    int mismatched = 0;
    for (int64_t i = 0; i < n; i++) mismatched += fabsf(grads[i] - 2.0f * once[i]) > 1e-6f + 1e-5f * fabsf(once[i]);
    CHECK_MSG(mismatched == 0, "%d gradients did not accumulate", mismatched);
    CHECK(cf_plan_run(t.plan, CF_PHASE_UPDATE, NULL) == 0);
    int nonzero = 0;
    for (int64_t i = 0; i < n; i++) nonzero += grads[i] != 0.0f;
    CHECK(nonzero == 0);
    CHECK(memcmp(before, params, sizeof(float) * (size_t)n) != 0);
    CHECK(*cf_tensor_i32(b.step) == 1);

    /* A non-finite gradient norm skips the step and clears the gradients. */
    memcpy(before, params, sizeof(float) * (size_t)n);
    CHECK(cf_plan_run(t.plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
    grads[3] = INFINITY;
    CHECK(cf_plan_run(t.plan, CF_PHASE_UPDATE, NULL) == 0);
    CHECK(isinf(*cf_tensor_f32(t.grad_norm)));
    CHECK(memcmp(before, params, sizeof(float) * (size_t)n) == 0);
    CHECK(*cf_tensor_i32(b.step) == 1 && grads[3] == 0.0f);
    free(before);
    free(once);
    teardown(&t);
}

static void count_node(void *ctx, const cf_node *node, double seconds) {
    int *calls = ctx;
    calls[node->phase]++;
    (void)seconds;
}

/* The profiling hook sees exactly the nodes of the phases that ran. */
static void check_hook(void) {
    cf_model_config cfg = tiny(CF_ARCH_GPT2);
    trainer t;
    if (setup(&t, &cfg, 1, 8)) return;
    int expected[CF_PHASE_ALL + 1] = {0}, calls[CF_PHASE_ALL + 1] = {0};
    for (int i = 0; i < cf_graph_num_nodes(t.m.graph); i++) expected[cf_graph_node(t.m.graph, i)->phase]++;
    cf_plan_set_hook(t.plan, count_node, calls);
    CHECK(cf_plan_run(t.plan, CF_PHASE_FORWARD | CF_PHASE_UPDATE, NULL) == 0);
    CHECK(calls[CF_PHASE_FORWARD] == expected[CF_PHASE_FORWARD] && calls[CF_PHASE_UPDATE] == expected[CF_PHASE_UPDATE]);
    CHECK(calls[CF_PHASE_BACKWARD] == 0 && expected[CF_PHASE_BACKWARD] > 0);
    teardown(&t);
}

/* A plan runs with denormals as zero on every thread that works for it, and hands the
 * caller its own floating-point mode back: moments in the denormal range (embedding rows
 * no batch touches) are read as zero by AdamW, so they come out exactly zero, not
 * 0.9x a denormal at ~100 cycles an operation. */
static void check_denormals(void) {
    cf_model_config cfg = tiny(CF_ARCH_LLAMA);
    trainer t;
    if (setup(&t, &cfg, 1, 8)) return;
    cf_param_blocks b = cf_graph_blocks(t.m.graph);
    int64_t n = cf_graph_param_elems(t.m.graph);
    float *m = cf_tensor_f32(b.adam_m), *v = cf_tensor_f32(b.adam_v);
    for (int64_t i = 0; i < n; i++) m[i] = v[i] = 1e-39f; /* below 2^-126 */
    memset(cf_tensor_f32(b.grads), 0, sizeof(float) * (size_t)n);
    unsigned before = _mm_getcsr();
    CHECK(cf_plan_run(t.plan, CF_PHASE_UPDATE, NULL) == 0);
    CHECK(_mm_getcsr() == before);
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) kept += m[i] != 0.0f || v[i] != 0.0f;
    CHECK_MSG(kept == 0, "%lld of %lld denormal moments were computed with, not read as zero",
              (long long)kept, (long long)n);
    teardown(&t);
}

/* Same seed, same thread count: bit-identical; other thread counts: equal to rounding. */
static void run_steps(int threads, float *loss_out, float *param_out) {
    cf_set_num_threads(threads, NULL);
    cf_model_config cfg = tiny(CF_ARCH_GPT2);
    trainer t;
    if (setup(&t, &cfg, 2, 8)) return;
    for (int s = 0; s < 3; s++) CHECK(cf_plan_run(t.plan, CF_PHASE_ALL, NULL) == 0);
    *loss_out = loss_of(&t);
    *param_out = cf_tensor_f32(cf_graph_blocks(t.m.graph).params)[100];
    teardown(&t);
}

static void check_reproducible(void) {
    float l1, p1, l2, p2, l3, p3;
    run_steps(2, &l1, &p1);
    run_steps(2, &l2, &p2);
    run_steps(1, &l3, &p3);
    cf_set_num_threads(0, NULL);
    CHECK(l1 == l2 && p1 == p2);
    CHECK_NEAR(l1, l3, 1e-5);
    CHECK_NEAR(p1, p3, 1e-6);
}

static void check_rng(void) {
    cf_rng a, b;
    cf_rng_seed_stream(&a, 99, 3);
    cf_rng_seed_stream(&b, 99, 3);
    CHECK(cf_rng_next(&a) == cf_rng_next(&b));
    cf_rng_seed_stream(&b, 99, 4);
    CHECK(cf_rng_next(&a) != cf_rng_next(&b));
    double sum = 0, sq = 0;
    for (int i = 0; i < 20000; i++) {
        double x = cf_rng_normal(&a);
        sum += x;
        sq += x * x;
    }
    CHECK_NEAR(sum / 20000, 0.0, 0.03);
    CHECK_NEAR(sq / 20000, 1.0, 0.05);
    /* The reference xoshiro256** sequence for state {1, 2, 3, 4}. */
    cf_rng r = {.s = {1, 2, 3, 4}};
    CHECK(cf_rng_next(&r) == 11520u);
    CHECK(cf_rng_next(&r) == 0u);
    CHECK(cf_rng_next(&r) == 1509978240u);
}

/* The counter itself works (or the zero-allocation checks would prove nothing). */
static void check_counter(void) {
#ifndef UNDER_ASAN
    atomic_store(&allocations, 0);
    atomic_store(&counting, true);
    void *volatile p = malloc(16);
    atomic_store(&counting, false);
    free(p);
    CHECK(atomic_load(&allocations) == 1);
#endif
}

int main(void) {
    check_counter();
    check_rng();
    check_training(CF_ARCH_LLAMA, "llama");
    check_training(CF_ARCH_GPT2, "gpt2");
    check_phases();
    check_hook();
    check_denormals();
    check_reproducible();
    return test_finish();
}
