/* The mixed-precision pass (docs/precision.md) on a LLaMA and a GPT-2 training graph:
 * with compute_dtype bf16 every forward product reads bf16 operands, the weights through
 * casts whose outputs are kept outside the arena (one per weight), flash attention reads
 * bf16 q/k/v and writes its output in bf16 (its only reader is a product), the fused
 * output layer reads bf16 input and weights (its loss and gradients f32), SwiGLU's gate
 * and up are stored bf16, and each product's weight gradient still lands directly in the
 * f32 gradient block (no separate accumulation node; the output layer's from its
 * forward); with f16 attention stays f32. The planned arena shrinks (llama_110m at
 * 1 x 1024, issue 19: bf16 at most 60% of f32's, with full recomputation at most 35%).
 * Precision keys other than compute_dtype accept only float32.
 * With gradient accumulation the weight copies are made once per step (by the first
 * micro-batch) and every micro-batch still sees the current weights: accumulating two
 * copies of a micro-batch trains bit-identically to that micro-batch alone. */
#include <string.h>

#include "cformers/config.h"
#include "cformers/model_graph.h"
#include "core/graph_internal.h"
#include "core/passes.h"
#include "kernels/fused_ops.h"
#include "kernels/graph_ops.h"
#include "train/trainer_internal.h"
#include "train_test_util.h"
#include "test_util.h"

static void check_graph(cf_arch arch, cf_dtype compute) {
    cf_config cfg;
    train_test_config(&cfg, arch, "");
    cfg.model.model_config.compute_dtype = compute;
    cf_model_graph m;
    cf_error err;
    CHECK_MSG(cf_model_graph_build(&cfg.model.model_config, 2, 32, NULL, &m, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_graph_apply_passes(m.graph, &cfg.context, &cfg.model.model_config, &err) == 0, "%s", err.msg);
    cf_graph *g = m.graph;
    int forward_nodes = g->n_nodes, products = 0, weight_casts = 0, swiglus = 0, attentions = 0;
    for (int i = 0; i < forward_nodes; i++) {
        const cf_node *n = g->nodes[i];
        if (n->op == &cf_op_matmul) {
            products++;
            CHECK_MSG(n->inputs[0]->dtype == compute && n->inputs[1]->dtype == compute, "%s: %s x %s", n->outputs[0]->name,
                      cf_dtype_name(n->inputs[0]->dtype), cf_dtype_name(n->inputs[1]->dtype));
        } else if (n->op == &cf_op_cast && n->inputs[0]->role == CF_ROLE_PARAM) {
            weight_casts++;
            CHECK(n->outputs[0]->keep && n->index < forward_nodes && n->weights_copy);
        } else if (n->weights_copy) {
            CHECK_MSG(0, "%s (%s) is marked a weight copy", n->outputs[0]->name, n->op->name);
        } else if (n->op == &cf_op_swiglu) {
            swiglus++;
            CHECK(n->inputs[0]->dtype == compute && n->inputs[1]->dtype == compute && n->outputs[0]->dtype == CF_F32);
        } else if (n->op == &cf_op_flash_attention) {
            attentions++;
            CHECK(n->inputs[0]->dtype == (compute == CF_BF16 ? CF_BF16 : CF_F32));
            CHECK_MSG(n->outputs[0]->dtype == n->inputs[0]->dtype, "%s is %s", n->outputs[0]->name,
                      cf_dtype_name(n->outputs[0]->dtype));
        } else if (n->op == &cf_op_linear_cross_entropy) {
            CHECK(n->inputs[0]->dtype == (compute == CF_BF16 ? CF_BF16 : CF_F32) && n->inputs[1]->dtype == n->inputs[0]->dtype);
            for (int k = 0; k < n->n_outputs; k++) CHECK(n->outputs[k]->dtype == CF_F32);
        } else if (n->op == &cf_op_rmsnorm || n->op == &cf_op_add_rmsnorm || n->op == &cf_op_layernorm ||
                   n->op == &cf_op_add_layernorm || n->op == &cf_op_embedding) {
            for (int k = 0; k < n->n_outputs; k++) CHECK(n->outputs[k]->dtype == CF_F32);
        }
    }
    /* per layer: Q, K, V, O and the MLP's 2 (GPT-2: fused QKV, proj, fc, proj) */
    int per_layer = arch == CF_ARCH_LLAMA ? 7 : 4;
    /* with bf16 the fused output layer reads a bf16 copy of its weights too */
    CHECK_MSG(products == 2 * per_layer && weight_casts == products + (compute == CF_BF16), "%d products, %d weight casts",
              products, weight_casts);
    CHECK(attentions == 2 && swiglus == (arch == CF_ARCH_LLAMA ? 2 : 0));
    CHECK(cf_graph_backward(g, m.loss, &err) == 0);
    /* the output layer's weight gradient: made by its forward into the gradient block */
    for (int i = 0; i < forward_nodes; i++)
        if (g->nodes[i]->op == &cf_op_linear_cross_entropy)
            CHECK(g->nodes[i]->outputs[2]->role == CF_ROLE_GRAD && g->nodes[i]->accumulate == 4u);
    /* only norms, biases, the embeddings' rows and the fused output layer (as in f32) need one */
    for (int i = forward_nodes; i < g->n_nodes; i++)
        if (g->nodes[i]->op == &cf_op_grad_accumulate)
            CHECK_MSG(g->nodes[i]->inputs[0]->ndim == 1 || strstr(g->nodes[i]->inputs[0]->name, "embed") ||
                          strstr(g->nodes[i]->inputs[0]->name, "lm_head") ||
                          strstr(g->nodes[i]->inputs[0]->name, ".wte.") || strstr(g->nodes[i]->inputs[0]->name, ".wpe."),
                      "%s is accumulated by a separate node", g->nodes[i]->inputs[0]->name);
    cf_graph_free(g);
}

static void count_weight_copies(void *ctx, const cf_node *node, double seconds) {
    (void)seconds;
    *(int *)ctx += node->weights_copy;
}

/* bf16, 3 steps of one micro-batch, then the same with gradient_accumulation_steps 2 and
 * that micro-batch twice: the same losses and weights, bit for bit (the mean of two equal
 * gradients is exact), with the weight copies made once per step. */
static void check_accumulation(void) {
    enum { STEPS = 3 };
    double losses[2][STEPS];
    float *last[2] = {NULL, NULL};
    int64_t numel = 0;
    int copies = 0, weights = 0;
    for (int accum = 1; accum <= 2; accum++) {
        cf_config cfg;
        train_test_config(&cfg, CF_ARCH_LLAMA, "");
        cfg.model.model_config.compute_dtype = CF_BF16;
        cfg.runner_config.batch_size = 2;
        cfg.runner_config.gradient_accumulation_steps = accum;
        cfg.runner_config.train_steps = STEPS;
        cf_error err;
        cf_train_options opts = {.quiet = true};
        cf_trainer *t = cf_trainer_create(&cfg, &opts, &err);
        CHECK_MSG(t != NULL, "%s", err.msg);
        if (!t) return;
        int32_t tokens[2][2 * 33];
        for (int i = 0; i < 2 * 33; i++) tokens[0][i] = tokens[1][i] = (i * 37 + 11) % 256;
        if (accum == 2) cf_plan_set_hook(t->plan, count_weight_copies, &copies);
        for (int s = 0; s < STEPS; s++) {
            for (int i = 0; i < 2 * 33; i++) tokens[0][i] = tokens[1][i] = (tokens[0][i] * 5 + s) % 256;
            CHECK_MSG(cf_trainer_step(t, tokens[0], &losses[accum - 1][s], &err) == 0, "%s", err.msg);
        }
        const cf_graph *g = cf_plan_graph(t->plan);
        for (int i = 0; i < g->n_nodes; i++) weights += accum == 2 && g->nodes[i]->weights_copy;
        float *w = cf_trainer_param(t, "model.layers.0.self_attn.q_proj.weight", &numel);
        if (w) last[accum - 1] = memcpy(malloc(sizeof(float) * (size_t)numel), w, sizeof(float) * (size_t)numel);
        cf_trainer_free(t);
    }
    for (int s = 0; s < STEPS; s++)
        CHECK_MSG(losses[0][s] == losses[1][s], "step %d: loss %.9g alone, %.9g accumulated twice", s, losses[0][s],
                  losses[1][s]);
    CHECK(last[0] && last[1] && memcmp(last[0], last[1], sizeof(float) * (size_t)numel) == 0);
    CHECK_MSG(weights > 0 && copies == STEPS * weights, "%d weight copies made in %d steps of %d weights", copies, STEPS,
              weights);
    free(last[0]);
    free(last[1]);
}

static double arena_mib(const char *dtype, const char *recompute) {
    const char *o[] = {"runner_config.batch_size=1", "runner_config.seq_length=1024", dtype, recompute};
    cf_config cfg;
    cf_error err;
    cf_memory_report r = {0};
    CHECK_MSG(cf_config_load_with_overrides("llama_110m", o, 4, &cfg, &err) == 0, "%s", err.msg);
    CHECK_MSG(cf_model_graph_memory(&cfg.model.model_config, &cfg.context, &cfg.recompute_config, 1, 1024, &r, &err) == 0,
              "%s", err.msg);
    return (double)r.arena_bytes / 1048576.0;
}

static char warned[4096];
static void keep_warning(const char *line, void *ctx) {
    (void)ctx;
    snprintf(warned, sizeof warned, "%s", line);
}

/* Lower precision asked for the parts kept in float32 (MindFormers' release YAMLs say
 * param_init_type: float16): accepted, float32 used, one warning naming the key; through
 * the API's validation (no warning channel) still refused. */
static void check_lower_precision_keys(void) {
    const char *keys[] = {"model.model_config.param_init_type=bfloat16", "model.model_config.softmax_compute_type=float16",
                          "model.model_config.layernorm_compute_type=bfloat16", "model.model_config.rotary_dtype=float16"};
    cf_config_set_warning_handler(keep_warning, NULL);
    for (int i = 0; i < 4; i++) {
        cf_config cfg;
        cf_error err;
        warned[0] = '\0';
        CHECK_MSG(cf_config_load_with_overrides("llama_15m", &keys[i], 1, &cfg, &err) == 0, "%s", err.msg);
        const cf_model_config *m = &cfg.model.model_config;
        CHECK(m->param_init_type == CF_F32 && m->softmax_compute_type == CF_F32 && m->layernorm_compute_type == CF_F32 &&
              m->rotary_dtype == CF_F32);
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(strchr(keys[i], '=') - keys[i]), keys[i]);
        CHECK_CONTAINS(warned, key);
        CHECK_CONTAINS(warned, "float32 is used instead");
        CHECK_MSG(cf_config_apply_override(&cfg, keys[i], &err) == 0, "%s", err.msg);
        CHECK(cf_config_validate(&cfg, &err) != 0);
        CHECK_CONTAINS(err.msg, key);
    }
    cf_config_set_warning_handler(NULL, NULL);
}

int main(void) {
    check_graph(CF_ARCH_LLAMA, CF_BF16);
    check_graph(CF_ARCH_LLAMA, CF_F16);
    check_graph(CF_ARCH_GPT2, CF_BF16);
    check_accumulation();
    const char *none = "recompute_config.recompute=false";
    double f32 = arena_mib("model.model_config.compute_dtype=float32", none);
    double bf16 = arena_mib("model.model_config.compute_dtype=bfloat16", none);
    double f16 = arena_mib("model.model_config.compute_dtype=float16", none);
    double bf16_full = arena_mib("model.model_config.compute_dtype=bfloat16", "recompute_config.recompute=true");
    printf("llama_110m 1 x 1024 arena: f32 %.0f MiB, bf16 %.0f MiB (%.0f%%), f16 %.0f MiB (%.0f%%), "
           "bf16 + full recompute %.0f MiB (%.0f%%)\n",
           f32, bf16, 100 * bf16 / f32, f16, 100 * f16 / f32, bf16_full, 100 * bf16_full / f32);
    CHECK_MSG(bf16 <= 0.60 * f32 && f16 < f32 && bf16_full <= 0.35 * f32, "bf16 %.0f, f16 %.0f, bf16 recomputed %.0f, f32 %.0f MiB",
              bf16, f16, bf16_full, f32);
    check_lower_precision_keys();
    return test_finish();
}
