/* What denormal floats cost a training step (`make bench-denormals`).
 *
 * The optimizer update (AdamW over the whole parameter block) of the llama_15m preset's
 * step graph, as the trainer builds it, in two states taking turns run by run: every
 * moment a normal float, and a share of the elements (--dormant, default 0.5) "dormant":
 * zero gradient and moments in the denormal range, as the embedding rows of tokens no
 * recent batch held reach after a few hundred steps (m shrinks 10x every 22 steps with
 * beta1 = 0.9). The engine computes with denormals as zero (core/denormals.h), so the
 * two should take the same time; each denormal operation would otherwise take a ~100-cycle
 * assist. Prints the median time of each state and their ratio.
 *
 *   bench_denormals [--runs N] [--dormant FRACTION] */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/config.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "cformers/threads.h"
#include "obs/clock.h"

#include "bench_util.h"

enum { BATCH = 4, SEQ = 256, MAX_RUNS = 200 };

/* Element i is dormant when it falls in the first `dormant` share of each 1000: spread
 * over every parameter, so every thread's part of the update holds some. */
static bool is_dormant(long i, double dormant) { return (double)(i % 1000) < dormant * 1000.0; }

/* Moments normal everywhere, or denormal where dormant; gradients zero where dormant. */
static void set_state(const cf_param_blocks *b, long n, double dormant, bool denormal) {
    float *m = cf_tensor_f32(b->adam_m), *v = cf_tensor_f32(b->adam_v), *g = cf_tensor_f32(b->grads);
    for (long i = 0; i < n; i++) {
        bool d = is_dormant(i, dormant);
        m[i] = d && denormal ? 1e-39f : 1e-6f;
        v[i] = d && denormal ? 2e-39f : 1e-8f;
        g[i] = d ? 0.0f : 1e-3f;
    }
}

static int usage(void) {
    fprintf(stderr, "usage: bench_denormals [--runs N (1..%d, default 15)] [--dormant FRACTION (0..1, default 0.5)]\n",
            MAX_RUNS);
    return 2;
}

int main(int argc, char **argv) {
    int runs = 15;
    double dormant = 0.5;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            runs = (int)strtol(argv[++i], &end, 10);
            if (*end || runs < 1 || runs > MAX_RUNS) return usage();
        } else if (strcmp(argv[i], "--dormant") == 0 && i + 1 < argc) {
            dormant = strtod(argv[++i], &end);
            if (*end || !(dormant >= 0.0 && dormant <= 1.0)) return usage();
        } else {
            return usage();
        }
    }
    cf_config cfg;
    cf_error err = {{0}};
    cf_model_graph m = {0};
    cf_plan *plan = NULL;
    cf_adamw_config adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    if (cf_config_load_with_overrides("llama_15m", NULL, 0, &cfg, &err) == 0 &&
        cf_model_graph_build(&cfg.model.model_config, BATCH, SEQ, NULL, &m, &err) == 0) {
        cf_tensor *lr = cf_graph_input(m.graph, "lr", CF_F32, 0, NULL);
        if (cf_graph_backward(m.graph, m.loss, &err) == 0) {
            cf_graph_adamw(m.graph, &adamw, lr);
            plan = cf_plan_create(m.graph, &err);
        }
        if (plan) {
            cf_plan_init_params(plan, 1);
            *cf_tensor_f32(lr) = 0.0f; /* weights stay as they are from run to run */
        }
    }
    if (!plan) {
        fprintf(stderr, "bench_denormals: llama_15m: %s\n", err.msg);
        return 1;
    }
    cf_param_blocks b = cf_graph_blocks(m.graph);
    long n = (long)cf_graph_param_elems(m.graph);
    printf("AdamW update of llama_15m (%ld parameters), %.0f%% dormant, %d runs each, %d threads\n", n,
           100.0 * dormant, runs, cf_num_threads());
    double t[2][MAX_RUNS];
    for (int r = -1; r < runs; r++) /* r = -1: warm-up */
        for (int state = 0; state < 2; state++) {
            set_state(&b, n, dormant, state == 1);
            double t0 = cf_clock_seconds();
            cf_plan_run(plan, CF_PHASE_UPDATE, NULL);
            if (r >= 0) t[state][r] = cf_clock_seconds() - t0;
        }
    double clean = bench_median(t[0], runs), denormal = bench_median(t[1], runs);
    printf("moments normal      %8.2f ms\n", 1e3 * clean);
    printf("dormant, denormal   %8.2f ms\n", 1e3 * denormal);
    printf("ratio %.2fx (1.00x: denormals cost nothing)\n", denormal / clean);
    cf_plan_free(plan);
    cf_graph_free(m.graph);
    return 0;
}
