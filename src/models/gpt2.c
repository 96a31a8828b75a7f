/* The GPT-2 training graph: learned positions, pre-LayerNorm blocks with a fused q/k/v
 * projection (c_attn, split after the matmul), GELU(tanh) MLP, biases everywhere and
 * the output head tied to the token embedding. Weights are nn.Linear-shaped [out, in]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cformers/fused.h"
#include "models/model_graphs.h"

typedef struct gpt2_ctx {
    cf_graph *g;
    int64_t d;
    float eps;
    cf_init w, w_residual;
} gpt2_ctx;

/* <prefix>.weight [out, in] and <prefix>.bias [out], then x W^T + b. */
static cf_tensor *linear(const gpt2_ctx *m, cf_tensor *x, int64_t out, int64_t in, cf_init init, int layer,
                         const char *name) {
    int64_t w_shape[2] = {out, in}, b_shape[1] = {out};
    cf_tensor *w = cf_model_param(m->g, 2, w_shape, init, true, "transformer.h.%d.%s.weight", layer, name);
    cf_tensor *b = cf_model_param(m->g, 1, b_shape, cf_init_zeros(), false, "transformer.h.%d.%s.bias", layer, name);
    return cf_nn_linear(m->g, x, w, b);
}

static cf_tensor *layernorm(const gpt2_ctx *m, cf_tensor *x, int layer, const char *name) {
    int64_t shape[1] = {m->d};
    cf_tensor *w = cf_model_param(m->g, 1, shape, cf_init_ones(), false, "transformer.h.%d.%s.weight", layer, name);
    cf_tensor *b = cf_model_param(m->g, 1, shape, cf_init_zeros(), false, "transformer.h.%d.%s.bias", layer, name);
    return cf_nn_layernorm(m->g, x, w, b, m->eps);
}

static cf_tensor *block(const gpt2_ctx *m, const cf_model_config *c, int i, cf_tensor *x) {
    cf_graph *g = m->g;
    int64_t d = m->d, ff = c->intermediate_size;
    cf_tensor *h = layernorm(m, x, i, "ln_1");
    cf_tensor *qkv[3] = {0};
    cf_nn_split(g, linear(m, h, 3 * d, d, m->w, i, "attn.c_attn"), 3, qkv);
    cf_tensor *q = cf_model_split_heads(g, qkv[0], c->num_heads), *k = cf_model_split_heads(g, qkv[1], c->num_heads),
              *v = cf_model_split_heads(g, qkv[2], c->num_heads);
    cf_tensor *a = c->use_flash_attention ? cf_nn_flash_attention(g, q, k, v) : cf_nn_attention(g, q, k, v);
    x = cf_nn_add(g, x, linear(m, cf_model_merge_heads(g, a), d, d, m->w_residual, i, "attn.c_proj"));
    h = layernorm(m, x, i, "ln_2");
    h = cf_nn_gelu(g, linear(m, h, ff, d, m->w, i, "mlp.c_fc"));
    return cf_nn_add(g, x, linear(m, h, d, ff, m->w_residual, i, "mlp.c_proj"));
}

cf_tensor *cf_gpt2_forward(const cf_model_config *c, int64_t batch, int64_t seq_len, cf_model_graph *out) {
    cf_graph *g = out->graph;
    float std = (float)c->initializer_range;
    gpt2_ctx m = {.g = g, .d = c->hidden_size, .eps = (float)c->rms_norm_eps, .w = cf_init_normal(std),
                  .w_residual = cf_init_normal(std / sqrtf(2.0f * (float)c->num_layers))};
    int64_t wte_shape[2] = {c->vocab_size, m.d}, wpe_shape[2] = {c->max_position_embeddings, m.d};
    cf_tensor *wte = cf_model_param(g, 2, wte_shape, m.w, false, "transformer.wte.weight");
    cf_tensor *wpe = cf_model_param(g, 2, wpe_shape, m.w, false, "transformer.wpe.weight");
    int32_t *positions = cf_xmalloc(sizeof(int32_t) * (size_t)seq_len);
    for (int64_t t = 0; t < seq_len; t++) positions[t] = (int32_t)t;
    cf_tensor *pos = cf_graph_const(g, "positions", CF_I32, 1, &seq_len, positions);
    free(positions);
    cf_tensor *x = cf_nn_add_broadcast(g, cf_nn_embedding(g, wte, out->tokens), cf_nn_embedding(g, wpe, pos));
    for (int i = 0; i < c->num_layers; i++) x = block(&m, c, i, x);
    int64_t d_shape[1] = {m.d};
    cf_tensor *ln_w = cf_model_param(g, 1, d_shape, cf_init_ones(), false, "transformer.ln_f.weight");
    cf_tensor *ln_b = cf_model_param(g, 1, d_shape, cf_init_zeros(), false, "transformer.ln_f.bias");
    return cf_nn_linear(g, cf_nn_layernorm(g, x, ln_w, ln_b, m.eps), wte, NULL);
}
