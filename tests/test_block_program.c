/* One block program, two executors: for each family's own recipe and for recipes made of
 * the other pieces over the same tables (LLaMA with GeGLU and with a GELU MLP, GPT-2
 * without projection biases, tied and untied heads), the training graph emitted from the program
 * (cf_transformer_forward_program, unfused and flash attention) and the inference
 * interpreter running the same program (prefill, then token-by-token decode over the KV
 * cache) give the same logits for the same weights and tokens: within 1e-5 of the largest
 * logit. SEQ crosses flash attention's 64-row tiles and a decode runs past them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/infer.h"
#include "cformers/plan.h"
#include "infer/model_internal.h"
#include "models/model_graphs.h"
#include "test_util.h"
#include "train_test_util.h"

enum { SEQ = 70, PREFILL = 40 };

typedef struct weights {
    cf_graph *g;
    float *extra[64]; /* tensors the program does not read (the graph has no parameter for them) */
    int n_extra;
} weights;

static const float *lookup(void *ctx, const char *name, int ndim, const int64_t *shape) {
    weights *w = ctx;
    cf_tensor *t = cf_graph_find(w->g, name);
    if (t) return cf_tensor_f32(t);
    if (w->n_extra == 64) return NULL;
    size_t n = (size_t)(ndim == 2 ? shape[0] * shape[1] : shape[0]);
    float *x = w->extra[w->n_extra++] = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) x[i] = (float)((i * 7919) % 13) * 0.01f - 0.06f;
    return x;
}

static double rel_diff(const float *a, const float *b, long n) {
    double worst = 0, largest = 0;
    for (long i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i])), largest = fmax(largest, fabs((double)b[i]));
    return largest > 0 ? worst / largest : worst;
}

static void check_recipe(const char *what, cf_arch arch, const cf_block_recipe *recipe, bool tie, bool flash) {
    cf_config cfg;
    train_test_config(&cfg, arch, "unused");
    cf_model_config *c = &cfg.model.model_config;
    c->max_position_embeddings = 128, c->tie_word_embeddings = tie, c->use_flash_attention = flash;
    const cf_family *f = cf_family_of(arch);
    cf_block_program p;
    cf_error err = {{0}};
    CHECK_MSG(cf_block_program_of_recipe(f, recipe, &p, &err) == 0, "%s: %s", what, err.msg);

    /* the graph: tokens [1, SEQ] -> logits [1, SEQ, vocab] */
    cf_model_graph mg = {.graph = cf_graph_create()};
    int64_t bt[2] = {1, SEQ};
    mg.tokens = cf_graph_input(mg.graph, "tokens", CF_I32, 2, bt);
    cf_tensor *logits = cf_transformer_forward_program(c, &p, 1, SEQ, &mg);
    cf_graph_keep(mg.graph, logits);
    CHECK_MSG(cf_graph_error(mg.graph, &err) == 0, "%s: %s", what, err.msg);
    cf_plan *plan = cf_plan_create(mg.graph, &err);
    CHECK_MSG(plan != NULL, "%s: %s", what, err.msg);
    if (!plan) return;
    cf_plan_init_params(plan, 11);
    int32_t tokens[SEQ];
    for (int i = 0; i < SEQ; i++) tokens[i] = (int32_t)((i * 37 + 5) % c->vocab_size);
    memcpy(mg.tokens->data, tokens, sizeof tokens);
    CHECK(cf_plan_run(plan, CF_PHASE_FORWARD, NULL) == 0);
    long vocab = (long)c->vocab_size;

    /* the interpreter on the graph's weights, running the same program */
    weights w = {.g = mg.graph};
    cf_infer_options opt = {.weight_dtype = CF_F32, .kv_cache = CF_KV_F32};
    cf_infer_model *m = cf_infer_from_weights(c, lookup, &w, &opt, &err);
    CHECK_MSG(m != NULL, "%s: %s", what, err.msg);
    if (m) {
        m->program = p;
        float *got = malloc(sizeof(float) * (size_t)(SEQ * vocab));
        CHECK_MSG(cf_infer_forward(m, tokens, SEQ, 0, got, true, &err) == 0, "%s: %s", what, err.msg);
        double prefill = rel_diff(got, cf_tensor_f32(logits), SEQ * vocab);
        /* prefill a part, then one token at a time: the decode attention paths */
        CHECK(cf_infer_forward(m, tokens, PREFILL, 0, got, true, &err) == 0);
        for (long t = PREFILL; t < SEQ; t++)
            CHECK(cf_infer_forward(m, tokens + t, 1, t, got + t * vocab, false, &err) == 0);
        double decode = rel_diff(got, cf_tensor_f32(logits), SEQ * vocab);
        CHECK_MSG(prefill <= 1e-5 && decode <= 1e-5, "%s: interpreter vs graph logits: prefill %g, decode %g", what,
                  prefill, decode);
        printf("  %-34s %s head, %s attention: interpreter vs graph %.1e (prefill), %.1e (decode)\n", what,
               tie ? "tied" : "untied", flash ? "flash" : "unfused", prefill, decode);
        free(got);
    }
    cf_infer_free(m);
    for (int i = 0; i < w.n_extra; i++) free(w.extra[i]);
    cf_plan_free(plan);
    cf_graph_free(mg.graph);
}

int main(void) {
    const cf_family *llama = cf_family_of(CF_ARCH_LLAMA), *gpt2 = cf_family_of(CF_ARCH_GPT2);
    cf_block_recipe geglu = llama->block, gelu = llama->block, plain = gpt2->block;
    geglu.mlp = CF_MLP_GEGLU;
    gelu.mlp = CF_MLP_GELU;
    plain.bias.qkv = plain.bias.out = plain.bias.up = plain.bias.down = false; /* LayerNorm keeps its bias */
    for (int flash = 0; flash < 2; flash++)
        for (int tie = 0; tie < 2; tie++) {
            for (int a = 0; a < CF_ARCH_COUNT; a++)
                check_recipe(cf_family_of((cf_arch)a)->name, (cf_arch)a, &cf_family_of((cf_arch)a)->block, tie, flash);
            check_recipe("llama with GeGLU", CF_ARCH_LLAMA, &geglu, tie, flash);
            check_recipe("llama with a GELU MLP", CF_ARCH_LLAMA, &gelu, tie, flash);
            check_recipe("gpt2 without projection biases", CF_ARCH_GPT2, &plain, tie, flash);
        }
    return test_finish();
}
