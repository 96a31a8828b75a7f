/* Activation recomputation (recompute_config) changes nothing but memory.
 *
 * Each case builds the same model twice from one config, runs forward + backward on the
 * same weights and tokens, once as built and once with cf_graph_recompute (whole layers,
 * or select_recompute), and requires the loss, every gradient and a forward-only loss to
 * be bit-identical: the clones run the same kernels on the same inputs in the same order.
 * Cases: LLaMA and GPT-2, unfused and with every fusion pass, unfused attention (whose
 * probabilities select_recompute drops) and flash attention; whole layers, selective, and
 * the first layer whole with the others selective (recompute_layers). Then the point of it: the
 * planned arena of a training step (with AdamW) shrinks, for whole layers to under half. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/model_graph.h"
#include "cformers/plan.h"
#include "cformers/train.h"
#include "core/passes.h"
#include "graph_test_util.h"
#include "test_util.h"

enum { BATCH = 2, SEQ = 24 };

typedef struct step {
    cf_model_graph m;
    cf_plan *plan;
    int clones;
    float eval_loss; /* a forward-only run after the step */
} step;

static cf_model_config tiny(cf_arch arch, bool flash) { return graph_test_model(arch, 97, 64, 3, 96, 32, flash); }

static void fill_ids(cf_tensor *t, int salt) { graph_test_fill_ids(t, 31, salt, 97); }

static step run_step(const cf_model_config *cfg, const cf_context_config *ctx, const cf_recompute_config *rc) {
    step s = {0};
    cf_error err = {{0}};
    CHECK_MSG(cf_model_graph_build(cfg, BATCH, SEQ, NULL, &s.m, &err) == 0, "%s", err.msg);
    if (!s.m.graph) return s;
    CHECK_MSG(cf_graph_fuse(s.m.graph, ctx, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_graph_backward(s.m.graph, s.m.loss, &err) == 0, "%s", err.msg);
    if (rc) {
        s.clones = cf_graph_recompute(s.m.graph, rc, &err);
        CHECK_MSG(s.clones >= 0, "%s", err.msg);
    }
    s.plan = graph_test_train_step(&s.m, 7, 31, 97);
    if (!s.plan) return s;
    float loss = *cf_tensor_f32(s.m.loss);
    fill_ids(s.m.tokens, 8); /* validation: forward only, the recomputing nodes do not run */
    CHECK(cf_plan_run(s.plan, CF_PHASE_FORWARD, NULL) == 0);
    s.eval_loss = *cf_tensor_f32(s.m.loss);
    *cf_tensor_f32(s.m.loss) = loss;
    return s;
}

static void release(step *s) {
    cf_plan_free(s->plan);
    cf_graph_free(s->m.graph);
}

/* Loss, forward-only loss and the whole gradient block bit for bit. */
static void compare(const char *what, const step *re, const step *plain) {
    CHECK_MSG(memcmp(re->m.loss->data, plain->m.loss->data, sizeof(float)) == 0, "%s: loss %.9g vs %.9g", what,
              *cf_tensor_f32(re->m.loss), *cf_tensor_f32(plain->m.loss));
    CHECK_MSG(memcmp(&re->eval_loss, &plain->eval_loss, sizeof(float)) == 0, "%s: forward-only loss differs", what);
    const cf_graph *g = re->m.graph;
    for (int i = 0; i < cf_graph_num_params(g); i++) {
        const cf_tensor *a = cf_graph_param_at(g, i)->grad, *b = cf_graph_param_at(plain->m.graph, i)->grad;
        if (memcmp(a->data, b->data, cf_tensor_bytes(a)) != 0) {
            CHECK_MSG(false, "%s: gradient of %s differs", what, cf_graph_param_at(g, i)->name);
            break;
        }
    }
}

enum mode { WHOLE, SELECTIVE, FIRST_LAYER }; /* FIRST_LAYER: layer 0 whole, selective in the others */

static void check_case(cf_arch arch, bool flash, bool fused, enum mode mode) {
    static const char *const modes[] = {"whole layers", "selective", "layer 0 + selective"};
    char what[96];
    snprintf(what, sizeof what, "%s, %s attention, %s, %s", arch == CF_ARCH_LLAMA ? "llama" : "gpt2",
             flash ? "flash" : "unfused", fused ? "fused" : "unfused graph", modes[mode]);
    cf_model_config cfg = tiny(arch, flash);
    cf_context_config ctx = {0};
    if (fused)
        ctx = (cf_context_config){.enable_graph_kernel = true, .enable_matrix_combine = true, .fuse_residual_norm = true,
                                  .fuse_rope = true, .fuse_cross_entropy = true};
    cf_recompute_config rc = {.recompute = mode != SELECTIVE, .recompute_layers = mode == FIRST_LAYER,
                              .select_recompute = mode != WHOLE};
    step plain = run_step(&cfg, &ctx, NULL), re = run_step(&cfg, &ctx, &rc);
    if (plain.plan && re.plan) {
        compare(what, &re, &plain);
        /* whole layers clone every layer; selective the attention (unfused) and MLP activations */
        int per_layer = flash ? 1 : 2, layers = (int)cfg.num_layers;
        int at_least = mode == WHOLE ? 3 * layers : mode == SELECTIVE ? per_layer * layers : 3 + per_layer * (layers - 1);
        CHECK_MSG(re.clones >= at_least, "%s: %d nodes recomputed, expected at least %d", what, re.clones, at_least);
        size_t a_re = cf_plan_memory(re.plan)->arena_bytes, a_plain = cf_plan_memory(plain.plan)->arena_bytes;
        CHECK_MSG(a_re <= a_plain, "%s: arena %zu, without recomputation %zu", what, a_re, a_plain);
        printf("  %-60s %2d clones, arena %7zu -> %7zu bytes\n", what, re.clones, a_plain, a_re);
    }
    release(&plain);
    release(&re);
}

/* The planned arena of a training step at a size where activations dominate. */
static void check_arena(cf_arch arch, bool flash) {
    cf_model_config cfg = tiny(arch, flash);
    cfg.hidden_size = 128, cfg.num_layers = 6, cfg.intermediate_size = 352, cfg.max_position_embeddings = 128;
    cf_context_config ctx = {.enable_graph_kernel = true, .fuse_residual_norm = true, .fuse_rope = true,
                             .fuse_cross_entropy = true};
    cf_recompute_config whole = {.recompute = true}, select = {.select_recompute = true},
                        half = {.recompute = true, .recompute_layers = 3};
    cf_memory_report plain, w, s, h;
    cf_error err = {{0}};
    CHECK_MSG(cf_model_graph_memory(&cfg, &ctx, NULL, 4, 128, &plain, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_model_graph_memory(&cfg, &ctx, &whole, 4, 128, &w, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_model_graph_memory(&cfg, &ctx, &select, 4, 128, &s, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_model_graph_memory(&cfg, &ctx, &half, 4, 128, &h, &err) == 0, "%s", err.msg);
    CHECK_MSG(w.arena_bytes < h.arena_bytes && h.arena_bytes < plain.arena_bytes, "first 3 layers: %zu", h.arena_bytes);
    const char *name = arch == CF_ARCH_LLAMA ? "llama" : "gpt2";
    printf("  %s %s attention, 6 layers d=128, 4 x 128: arena %zu, whole layers %zu (%.1f%%), selective %zu (%.1f%%)\n",
           name, flash ? "flash" : "unfused", plain.arena_bytes, w.arena_bytes,
           100.0 * (double)w.arena_bytes / (double)plain.arena_bytes, s.arena_bytes,
           100.0 * (double)s.arena_bytes / (double)plain.arena_bytes);
    CHECK_MSG(2 * w.arena_bytes < plain.arena_bytes, "%s: whole layers %zu of %zu", name, w.arena_bytes,
              plain.arena_bytes);
    CHECK_MSG(s.arena_bytes < plain.arena_bytes && w.arena_bytes < s.arena_bytes, "%s: selective %zu of %zu", name,
              s.arena_bytes, plain.arena_bytes);
}

/* Through the trainer (recompute_config read from the config): three AdamW steps of two
 * accumulated micro-batches give the same losses and weights bit for bit. */
static void check_trainer(void) {
    double losses[3][3];
    float *weights[3] = {0};
    int64_t numel = 0;
    static const char *const modes[3][2] = {{"recompute_config.recompute=false", "recompute_config.select_recompute=false"},
                                            {"recompute_config.recompute=true", "recompute_config.select_recompute=false"},
                                            {"recompute_config.recompute=false", "recompute_config.select_recompute=true"}};
    int32_t tokens[2 * 2 * 33];
    for (int mode = 0; mode < 3; mode++) {
        const char *overrides[] = {"runner_config.batch_size=2", "runner_config.seq_length=32",
                                   "runner_config.gradient_accumulation_steps=2", "runner_config.train_steps=3",
                                   "train_dataset.data_dir=", "train_dataset.tokenizer=", "lr_schedule.warmup_steps=0",
                                   "model.model_config.use_flash_attention=false", modes[mode][0], modes[mode][1]};
        cf_config cfg;
        cf_error err = {{0}};
        cf_train_options opts = {.quiet = true};
        cf_trainer *t = NULL;
        CHECK_MSG(cf_config_load_with_overrides("tiny_shakespeare", overrides, 10, &cfg, &err) == 0 &&
                      (t = cf_trainer_create(&cfg, &opts, &err)) != NULL,
                  "%s", err.msg);
        if (!t) return;
        for (int s = 0; s < 3; s++) {
            for (int i = 0; i < 2 * 2 * 33; i++) tokens[i] = (int32_t)((i * 7 + s * 13) % 512);
            CHECK_MSG(cf_trainer_step(t, tokens, &losses[mode][s], &err) == 0, "%s", err.msg);
        }
        float *w = cf_trainer_param(t, "model.layers.0.self_attn.q_proj.weight", &numel);
        weights[mode] = w ? memcpy(malloc(sizeof(float) * (size_t)numel), w, sizeof(float) * (size_t)numel) : NULL;
        cf_trainer_free(t);
    }
    for (int mode = 1; mode < 3; mode++) {
        CHECK_MSG(memcmp(losses[mode], losses[0], sizeof losses[0]) == 0, "trainer mode %d: losses %.9g %.9g %.9g", mode,
                  losses[mode][0], losses[mode][1], losses[mode][2]);
        CHECK(weights[mode] && weights[0] && memcmp(weights[mode], weights[0], sizeof(float) * (size_t)numel) == 0);
    }
    printf("  trainer, 3 steps x 2 micro-batches: losses %.6f %.6f %.6f in every mode\n", losses[0][0], losses[0][1],
           losses[0][2]);
    for (int mode = 0; mode < 3; mode++) free(weights[mode]);
}

static void check_errors(void) {
    cf_model_config cfg = tiny(CF_ARCH_LLAMA, true);
    cf_model_graph m;
    cf_error err = {{0}};
    cf_recompute_config rc = {.recompute = true}, none = {0};
    CHECK(cf_model_graph_build(&cfg, BATCH, SEQ, NULL, &m, &err) == 0);
    CHECK(cf_graph_recompute(m.graph, &rc, &err) == -1);
    CHECK_CONTAINS(err.msg, "no backward pass");
    int nodes = cf_graph_num_nodes(m.graph);
    CHECK(cf_graph_backward(m.graph, m.loss, &err) == 0);
    nodes = cf_graph_num_nodes(m.graph);
    CHECK(cf_graph_recompute(m.graph, &none, &err) == 0 && cf_graph_num_nodes(m.graph) == nodes);
    cf_graph_free(m.graph);
}

int main(void) {
    for (int arch = 0; arch < 2; arch++)
        for (int flash = 0; flash < 2; flash++)
            for (int fused = 0; fused < 2; fused++)
                for (int mode = WHOLE; mode <= FIRST_LAYER; mode++)
                    check_case(arch ? CF_ARCH_GPT2 : CF_ARCH_LLAMA, flash, fused, (enum mode)mode);
    check_arena(CF_ARCH_LLAMA, true);
    check_arena(CF_ARCH_LLAMA, false);
    check_arena(CF_ARCH_GPT2, false);
    check_trainer();
    check_errors();
    return test_finish();
}
