/* The GPT-2 training graph: learned positions, pre-LayerNorm blocks with a fused q/k/v
 * projection (c_attn, split after the matmul), GELU(tanh) MLP, biases everywhere and
 * the output head tied to the token embedding. Weights are nn.Linear-shaped [out, in]. */
#include <stdio.h>
#include <stdlib.h>

#include "cformers/fused.h"
#include "models/model_graphs.h"

/* x W^T + b with the weight and bias of `role` (its bias is the next role). */
static cf_tensor *linear(cf_graph *g, const cf_model_config *c, cf_tensor *x, cf_weight_role role, int layer) {
    cf_tensor *w = cf_model_weight(g, c, role, layer);
    return cf_nn_linear(g, x, w, cf_model_weight(g, c, (cf_weight_role)(role + 1), layer));
}

static cf_tensor *layernorm(cf_graph *g, const cf_model_config *c, cf_tensor *x, cf_weight_role role, int layer) {
    cf_tensor *w = cf_model_weight(g, c, role, layer);
    return cf_nn_layernorm(g, x, w, cf_model_weight(g, c, (cf_weight_role)(role + 1), layer), (float)c->rms_norm_eps);
}

static cf_tensor *block(cf_graph *g, const cf_model_config *c, int i, cf_tensor *x) {
    cf_tensor *h = layernorm(g, c, x, WR_ATTN_NORM, i);
    cf_tensor *qkv[3] = {0};
    cf_nn_split(g, linear(g, c, h, WR_QKV, i), 3, qkv);
    cf_tensor *q = cf_model_split_heads(g, qkv[0], c->num_heads), *k = cf_model_split_heads(g, qkv[1], c->num_heads),
              *v = cf_model_split_heads(g, qkv[2], c->num_heads);
    cf_tensor *a = c->use_flash_attention ? cf_nn_flash_attention(g, q, k, v) : cf_nn_attention(g, q, k, v);
    x = cf_nn_add(g, x, linear(g, c, cf_model_merge_heads(g, a), WR_WO, i));
    h = layernorm(g, c, x, WR_FFN_NORM, i);
    h = cf_nn_gelu(g, linear(g, c, h, WR_UP, i));
    return cf_nn_add(g, x, linear(g, c, h, WR_DOWN, i));
}

cf_tensor *cf_gpt2_forward(const cf_model_config *c, int64_t batch, int64_t seq_len, cf_model_graph *out) {
    (void)batch;
    cf_graph *g = out->graph;
    cf_tensor *wte = cf_model_weight(g, c, WR_EMBED, 0), *wpe = cf_model_weight(g, c, WR_POS_EMBED, 0);
    int32_t *positions = cf_xmalloc(sizeof(int32_t) * (size_t)seq_len);
    for (int64_t t = 0; t < seq_len; t++) positions[t] = (int32_t)t;
    cf_tensor *pos = cf_graph_const(g, "positions", CF_I32, 1, &seq_len, positions);
    free(positions);
    cf_tensor *x = cf_nn_add_broadcast(g, cf_nn_embedding(g, wte, out->tokens), cf_nn_embedding(g, wpe, pos));
    for (int i = 0; i < c->num_layers; i++) x = block(g, c, i, x);
    x = layernorm(g, c, x, WR_FINAL_NORM, 0);
    return cf_nn_linear(g, x, c->tie_word_embeddings ? wte : cf_model_weight(g, c, WR_LM_HEAD, 0), NULL);
}
