/* Fused against unfused, in one run (`make bench-fusion`).
 *
 * Part 1, attention: forward + backward of causal attention (B=1, H=8, hd=64, the shape
 * of a 512-wide model) as the flash op (on f32 q, k, v, and on q, k, v cast to bf16, the
 * casts and their gradients included) and as the unfused op, at each sequence length:
 * median wall and CPU time of the runs (CPU time, summed over the pool's threads, is
 * the fairer measure on a machine others are loading too), and the attention memory, the bytes the op keeps for
 * the backward (probabilities vs log-sum-exp) plus the scratch both passes ask for.
 * The unfused op stops at --max-unfused (its probabilities grow as T^2); flash goes on.
 *
 * Part 2, training step: forward, backward and AdamW of the llama_15m preset's model
 * (6 layers, 288 wide, vocabulary 32000) and of a GPT-2 of that shape (the gpt2 preset
 * cut to 6 layers, 288 wide: vocabulary 50257, LayerNorm, GELU MLP, biases) at --batch
 * x 256 tokens, with every fusion off, with each one that applies alone, and with all
 * on, the variants taking turns step by step: median step time, tokens/s and the
 * planned arena. The graph is built as the trainer builds it (model, passes, backward,
 * AdamW).
 *
 * Part 3, the matrix-combine threshold: forward + backward of three [d, d] projections
 * of 512 tokens, separate against combined, by d; combining pays from the smallest d
 * where it is faster (the matrix_combine_threshold default is 3 d^2 of that d).
 *
 *   bench_fusion [--runs N] [--min-seq T] [--max-seq T] [--max-unfused T] [--batch B]
 *                [--only attention|step|combine]
 *
 * --only runs one part; --min-seq (default 256) the first length of part 1 (the AVX2 flash-attention work measured part 1 alone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


#include "cformers/config.h"
#include "cformers/fused.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "cformers/threads.h"
#include "core/passes.h"
#include "obs/clock.h"

#include "bench_util.h"

enum { HEADS = 8, HEAD_DIM = 64 };

typedef struct bench_opts {
    int runs;
    long min_seq, max_seq, max_unfused, batch;
    const char *only; /* NULL: every part */
} bench_opts;

typedef cf_tensor *(*attention_fn)(cf_graph *, cf_tensor *, cf_tensor *, cf_tensor *);

typedef struct attn_result {
    double seconds, cpu_seconds;
    size_t attention_bytes;
} attn_result;

static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Saved outputs (every output but the result) and workspaces of the attention nodes:
 * the memory attention itself costs beyond its inputs, output and gradients. */
static size_t attention_bytes(const cf_graph *g) {
    size_t bytes = 0;
    for (int i = 0; i < cf_graph_num_nodes(g); i++) {
        const cf_node *n = cf_graph_node(g, i);
        if (!strstr(n->op->name, "attention")) continue;
        if (n->op->workspace) bytes += n->op->workspace(n);
        if (n->op->backward)
            for (int k = 1; k < n->n_outputs; k++) bytes += cf_tensor_bytes(n->outputs[k]);
    }
    return bytes;
}

typedef struct timing {
    double wall, cpu; /* medians, seconds */
} timing;

/* One warm-up run (page faults, caches), then the median of `runs` timed ones. */
static timing time_runs(cf_plan *p, unsigned phases, int runs) {
    double *t = calloc(2 * (size_t)runs, sizeof *t), *cpu = t + runs;
    cf_plan_run(p, phases, NULL);
    for (int r = 0; r < runs; r++) {
        double t0 = cf_clock_seconds(), c0 = cpu_seconds();
        cf_plan_run(p, phases, NULL);
        t[r] = cf_clock_seconds() - t0;
        cpu[r] = cpu_seconds() - c0;
    }
    timing res = {bench_median(t, runs), bench_median(cpu, runs)};
    free(t);
    return res;
}

static int bench_attention(attention_fn attend, long seq, int runs, attn_result *res) {
    cf_graph *g = cf_graph_create();
    int64_t shape[4] = {1, seq, HEADS, HEAD_DIM};
    cf_tensor *q = cf_graph_param(g, "q", 4, shape, cf_init_normal(1.0f), false);
    cf_tensor *k = cf_graph_param(g, "k", 4, shape, cf_init_normal(1.0f), false);
    cf_tensor *v = cf_graph_param(g, "v", 4, shape, cf_init_normal(1.0f), false);
    cf_tensor *dy = cf_graph_input(g, "dy", CF_F32, 4, shape);
    cf_tensor *out = attend(g, q, k, v);
    cf_error err = {{0}};
    cf_plan *p = NULL;
    if (cf_graph_backward_from(g, out, dy, &err) != 0 || !(p = cf_plan_create(g, &err))) {
        fprintf(stderr, "bench_fusion: attention T=%ld: %s\n", seq, err.msg);
        cf_graph_free(g);
        return -1;
    }
    cf_plan_init_params(p, 1);
    memset(dy->data, 0, cf_tensor_bytes(dy));
    timing t = time_runs(p, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, runs);
    res->seconds = t.wall;
    res->cpu_seconds = t.cpu;
    res->attention_bytes = attention_bytes(g);
    cf_plan_free(p);
    cf_graph_free(g);
    return 0;
}

static cf_tensor *flash_bf16(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v) {
    return cf_nn_flash_attention(g, cf_nn_cast(g, q, CF_BF16), cf_nn_cast(g, k, CF_BF16), cf_nn_cast(g, v, CF_BF16));
}

static int part_attention(const bench_opts *o) {
    printf("## Attention forward + backward (B=1, H=%d, hd=%d, %d threads, median of %d runs)\n\n", HEADS, HEAD_DIM,
           cf_num_threads(), o->runs);
    printf("| T | unfused ms | flash ms | bf16 flash ms | unfused cpu ms | flash cpu ms | bf16 flash cpu ms | "
           "speedup f32, bf16 (cpu) | unfused attn MiB | flash attn MiB | bf16 flash attn MiB | memory ratio f32, bf16 "
           "|\n");
    printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (long seq = o->min_seq; seq <= o->max_seq; seq *= 2) {
        attn_result flash, bf16, unfused = {0};
        bool with_unfused = seq <= o->max_unfused;
        if (bench_attention(cf_nn_flash_attention, seq, o->runs, &flash) != 0 ||
            bench_attention(flash_bf16, seq, o->runs, &bf16) != 0)
            return -1;
        if (with_unfused && bench_attention(cf_nn_attention, seq, o->runs, &unfused) != 0) return -1;
        double mib = 1.0 / (1024.0 * 1024.0);
        if (with_unfused)
            printf("| %ld | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.2fx, %.2fx | %.1f | %.2f | %.2f | %.0fx, %.0fx |\n",
                   seq, unfused.seconds * 1e3, flash.seconds * 1e3, bf16.seconds * 1e3, unfused.cpu_seconds * 1e3,
                   flash.cpu_seconds * 1e3, bf16.cpu_seconds * 1e3, unfused.cpu_seconds / flash.cpu_seconds,
                   unfused.cpu_seconds / bf16.cpu_seconds, (double)unfused.attention_bytes * mib,
                   (double)flash.attention_bytes * mib, (double)bf16.attention_bytes * mib,
                   (double)unfused.attention_bytes / (double)flash.attention_bytes,
                   (double)unfused.attention_bytes / (double)bf16.attention_bytes);
        else
            printf("| %ld | (not run) | %.1f | %.1f | | %.1f | %.1f | | (probs alone %.0f) | %.2f | %.2f | |\n", seq,
                   flash.seconds * 1e3, bf16.seconds * 1e3, flash.cpu_seconds * 1e3, bf16.cpu_seconds * 1e3,
                   (double)HEADS * (double)seq * (double)seq * 4.0 * mib, (double)flash.attention_bytes * mib,
                   (double)bf16.attention_bytes * mib);
        fflush(stdout);
    }
    printf("\n");
    return 0;
}

/* ---- part 2: training steps ---- */

typedef struct variant {
    const char *name;
    bool flash, combine, residual_norm, fuse_cross_entropy, rope_in_place;
    bool llama_only; /* GPT-2 has no RoPE and already one q/k/v projection */
} variant;

static void fill_ids(cf_tensor *t, int64_t vocab) {
    int32_t *ids = cf_tensor_i32(t);
    for (int64_t i = 0; i < cf_tensor_numel(t); i++) ids[i] = (int32_t)((i * 7919 + 13) % vocab);
}

enum { N_VARIANTS = 7 };

static const variant variants[N_VARIANTS] = {
    {"all off", false, false, false, false, false, false},
    {"flash attention", true, false, false, false, false, false},
    {"matrix combine", false, true, false, false, false, true},
    {"residual add + norm", false, false, true, false, false, false},
    {"RoPE in place", false, false, false, false, true, true},
    {"fused cross-entropy", false, false, false, true, false, false},
    {"all on", true, true, true, true, true, false},
};

/* The models of part 2: a preset and the overrides that shape it. */
typedef struct step_model {
    const char *title, *preset;
    const char *overrides[4];
    bool llama;
} step_model;

static const step_model step_models[] = {
    {"llama_15m shape", "llama_15m", {NULL}, true},
    {"GPT-2 at the llama_15m shape (vocabulary 50257)", "gpt2",
     {"model.model_config.hidden_size=288", "model.model_config.num_layers=6", "model.model_config.num_heads=6",
      "runner_config.seq_length=256"},
     false},
};

/* The step graph as the trainer builds it, planned and filled. */
static cf_plan *build_step(const cf_config *base, const variant *v, long batch, cf_model_graph *m) {
    cf_config cfg = *base;
    cfg.model.model_config.use_flash_attention = v->flash;
    cfg.context.enable_graph_kernel = true;
    cfg.context.enable_matrix_combine = v->combine;
    cfg.context.matrix_combine_threshold = 0;
    cfg.context.fuse_residual_norm = v->residual_norm;
    cfg.context.fuse_cross_entropy = v->fuse_cross_entropy;
    cfg.context.fuse_rope = v->rope_in_place;
    const cf_model_config *mc = &cfg.model.model_config;
    cf_error err = {{0}};
    cf_plan *p = NULL;
    cf_adamw_config adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    if (cf_model_graph_build(mc, batch, cfg.runner_config.seq_length, NULL, m, &err) == 0) {
        cf_tensor *lr = cf_graph_input(m->graph, "lr", CF_F32, 0, NULL);
        if (cf_graph_fuse(m->graph, &cfg.context, &err) == 0 && cf_graph_backward(m->graph, m->loss, &err) == 0) {
            cf_graph_adamw(m->graph, &adamw, lr);
            p = cf_plan_create(m->graph, &err);
        }
        if (p) {
            cf_plan_init_params(p, 1);
            fill_ids(m->tokens, mc->vocab_size);
            fill_ids(m->targets, mc->vocab_size);
            *cf_tensor_f32(lr) = 0.0f; /* every timed step sees the same weights */
            return p;
        }
    }
    fprintf(stderr, "bench_fusion: %s: %s\n", v->name, err.msg);
    return NULL;
}

/* Variants take turns step by step, so load from elsewhere on the machine falls on
 * all of them alike. Variants that change nothing in this model are left out. */
static int bench_steps(const bench_opts *o, const step_model *model) {
    cf_config base;
    cf_error err = {{0}};
    int n_overrides = 0;
    while (n_overrides < 4 && model->overrides[n_overrides]) n_overrides++;
    if (cf_config_load_with_overrides(model->preset, model->overrides, n_overrides, &base, &err) != 0) {
        fprintf(stderr, "bench_fusion: %s\n", err.msg);
        return -1;
    }
    cf_model_graph m[N_VARIANTS] = {0};
    cf_plan *plans[N_VARIANTS] = {0};
    double *wall = calloc(2 * N_VARIANTS * (size_t)o->runs, sizeof *wall), *cpu = wall + N_VARIANTS * o->runs;
    int rc = 0;
    for (int v = 0; v < N_VARIANTS && rc == 0; v++)
        if ((model->llama || !variants[v].llama_only) && !(plans[v] = build_step(&base, &variants[v], o->batch, &m[v])))
            rc = -1;
    for (int r = -1; r < o->runs && rc == 0; r++) /* r = -1: warm-up */
        for (int v = 0; v < N_VARIANTS; v++) {
            if (!plans[v]) continue;
            double t0 = cf_clock_seconds(), c0 = cpu_seconds();
            cf_plan_run(plans[v], CF_PHASE_ALL, NULL);
            if (r >= 0) {
                wall[v * o->runs + r] = cf_clock_seconds() - t0;
                cpu[v * o->runs + r] = cpu_seconds() - c0;
            }
        }
    long tokens = o->batch * (long)base.runner_config.seq_length;
    if (rc == 0) {
        printf("## Training step, %s, batch %ld x %lld tokens (%d threads, median of %d steps)\n\n", model->title,
               o->batch, (long long)base.runner_config.seq_length, cf_num_threads(), o->runs);
        printf("| fusions | step ms | step cpu ms | tokens/s | vs all off (wall, cpu) | arena MiB |\n");
        printf("|---|---:|---:|---:|---:|---:|\n");
    }
    timing off = {0};
    for (int v = 0; v < N_VARIANTS && rc == 0; v++) {
        if (!plans[v]) continue;
        timing t = {bench_median(wall + v * o->runs, o->runs), bench_median(cpu + v * o->runs, o->runs)};
        if (v == 0) off = t;
        printf("| %s | %.1f | %.1f | %.0f | %.2fx, %.2fx | %.1f |\n", variants[v].name, t.wall * 1e3, t.cpu * 1e3,
               (double)tokens / t.wall, off.wall / t.wall, off.cpu / t.cpu,
               (double)cf_plan_memory(plans[v])->arena_bytes / (1024.0 * 1024.0));
    }
    printf("\n");
    for (int v = 0; v < N_VARIANTS; v++) {
        cf_plan_free(plans[v]);
        cf_graph_free(m[v].graph);
    }
    free(wall);
    return rc;
}

static int part_step(const bench_opts *o) {
    for (size_t i = 0; i < sizeof step_models / sizeof step_models[0]; i++)
        if (bench_steps(o, &step_models[i]) != 0) return -1;
    return 0;
}

/* ---- part 3: when combining projections pays ---- */

static int bench_projections(long d, bool combined, int runs, timing *res) {
    enum { TOKENS = 512 };
    cf_graph *g = cf_graph_create();
    int64_t x_shape[2] = {TOKENS, d}, w_shape[2] = {d, d};
    cf_tensor *x = cf_graph_param(g, "x", 2, x_shape, cf_init_normal(1.0f), false);
    cf_tensor *y = NULL;
    for (int i = 0; i < 3; i++) {
        char name[8] = {'w', (char)('0' + i), 0};
        cf_tensor *p = cf_nn_linear(g, x, cf_graph_param(g, name, 2, w_shape, cf_init_normal(0.1f), false), NULL);
        y = y ? cf_nn_add(g, y, p) : p;
    }
    cf_tensor *dy = cf_graph_input(g, "dy", CF_F32, 2, x_shape);
    cf_error err = {{0}};
    cf_plan *plan = NULL;
    if ((combined && cf_pass_matrix_combine(g, 0) != 1) || cf_graph_backward_from(g, y, dy, &err) != 0 ||
        !(plan = cf_plan_create(g, &err))) {
        fprintf(stderr, "bench_fusion: projections d=%ld: %s\n", d, err.msg);
        cf_graph_free(g);
        return -1;
    }
    cf_plan_init_params(plan, 2);
    memset(dy->data, 0, cf_tensor_bytes(dy));
    *res = time_runs(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, runs);
    cf_plan_free(plan);
    cf_graph_free(g);
    return 0;
}

static int part_combine(const bench_opts *o) {
    int runs = o->runs < 21 ? 21 : o->runs; /* milliseconds each: many runs are cheap */
    printf("## Matrix combine: three [d, d] projections of 512 tokens, forward + backward (median of %d)\n\n", runs);
    printf("| d | 3 d^2 | separate cpu ms | combined cpu ms | speedup (wall, cpu) |\n|---:|---:|---:|---:|---:|\n");
    for (long d = 32; d <= 512; d *= 2) {
        timing sep, comb;
        if (bench_projections(d, false, runs, &sep) != 0 || bench_projections(d, true, runs, &comb) != 0) return -1;
        printf("| %ld | %ld | %.2f | %.2f | %.2fx, %.2fx |\n", d, 3 * d * d, sep.cpu * 1e3, comb.cpu * 1e3,
               sep.wall / comb.wall, sep.cpu / comb.cpu);
        fflush(stdout);
    }
    printf("\n");
    return 0;
}

/* Options come in pairs: --name value. */
static int parse_args(int argc, char **argv, bench_opts *o) {
    for (int i = 1; i < argc; i += 2) {
        long value = i + 1 < argc ? strtol(argv[i + 1], NULL, 10) : 0;
        if (strcmp(argv[i], "--runs") == 0 && value > 0) {
            o->runs = (int)value;
        } else if (strcmp(argv[i], "--min-seq") == 0 && value >= 1) {
            o->min_seq = value;
        } else if (strcmp(argv[i], "--max-seq") == 0 && value >= 256) {
            o->max_seq = value;
        } else if (strcmp(argv[i], "--max-unfused") == 0 && value > 0) {
            o->max_unfused = value;
        } else if (strcmp(argv[i], "--batch") == 0 && value > 0) {
            o->batch = value;
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "attention") == 0 || strcmp(argv[i + 1], "step") == 0 ||
                    strcmp(argv[i + 1], "combine") == 0)) {
            o->only = argv[i + 1];
        } else {
            fprintf(stderr, "usage: bench_fusion [--runs N] [--min-seq T] [--max-seq T>=256] [--max-unfused T] [--batch B] "
                            "[--only attention|step|combine]\n");
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    bench_opts o = {.runs = 3, .min_seq = 256, .max_seq = 16384, .max_unfused = 4096, .batch = 2};
    if (parse_args(argc, argv, &o) != 0) return 2;
    bool all = !o.only;
    int rc = 0;
    if (all || strcmp(o.only, "attention") == 0) rc |= part_attention(&o);
    if (rc == 0 && (all || strcmp(o.only, "combine") == 0)) rc |= part_combine(&o);
    if (rc == 0 && (all || strcmp(o.only, "step") == 0)) rc |= part_step(&o);
    return rc == 0 ? 0 : 1;
}
