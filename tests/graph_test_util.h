/* Shared by the tests that build a tiny model's training graph themselves (test_fusion,
 * test_recompute): the model config and deterministic token ids. */
#ifndef CFORMERS_GRAPH_TEST_UTIL_H
#define CFORMERS_GRAPH_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/model_config.h"
#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "cformers/tensor.h"
#include "test_util.h"

/* A `layers`-deep, `hidden`-wide model of 4 heads (LLaMA: 2 KV heads; GPT-2: tied head)
 * over `vocab` ids, MLP `inter` wide, positions up to `max_pos`. */
static inline cf_model_config graph_test_model(cf_arch arch, int64_t vocab, int64_t hidden, int64_t layers,
                                               int64_t inter, int64_t max_pos, bool flash) {
    return (cf_model_config){.arch = arch, .vocab_size = vocab, .hidden_size = hidden, .num_layers = layers,
                             .num_heads = 4, .num_kv_heads = arch == CF_ARCH_LLAMA ? 2 : 4, .intermediate_size = inter,
                             .max_position_embeddings = max_pos, .rope_theta = 10000.0, .rms_norm_eps = 1e-5,
                             .tie_word_embeddings = arch == CF_ARCH_GPT2, .use_flash_attention = flash,
                             .initializer_range = 0.1};
}

/* ids[i] = (i * mul + salt) % vocab over the whole tensor. */
static inline void graph_test_fill_ids(cf_tensor *t, int64_t mul, int salt, int64_t vocab) {
    int32_t *ids = cf_tensor_i32(t);
    for (int64_t i = 0; i < cf_tensor_numel(t); i++) ids[i] = (int32_t)((i * mul + salt) % vocab);
}

/* The plan of m's graph (its passes already run), weights from `seed`, tokens and targets
 * filled as graph_test_fill_ids(.., mul, 3 / 4, vocab) with target 5 ignored (-1), and one
 * forward + backward run. NULL (the failure reported) when it cannot be planned. */
static inline cf_plan *graph_test_train_step(cf_model_graph *m, uint64_t seed, int64_t mul, int64_t vocab) {
    cf_error err = {{0}};
    cf_plan *plan = cf_plan_create(m->graph, &err);
    CHECK_MSG(plan != NULL, "%s", err.msg);
    if (!plan) return NULL;
    cf_plan_init_params(plan, seed);
    graph_test_fill_ids(m->tokens, mul, 3, vocab);
    graph_test_fill_ids(m->targets, mul, 4, vocab);
    cf_tensor_i32(m->targets)[5] = -1;
    CHECK(cf_plan_run(plan, CF_PHASE_FORWARD | CF_PHASE_BACKWARD, NULL) == 0);
    return plan;
}

#endif
