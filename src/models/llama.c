/* The LLaMA training graph: pre-norm decoder blocks with RMSNorm, RoPE (interleaved
 * pairs), causal grouped-query attention and a SwiGLU MLP, no biases; the output head
 * is the embedding when tie_word_embeddings. Names follow Hugging Face. */
#include "cformers/fused.h"
#include "models/model_graphs.h"

static cf_tensor *attention_block(cf_graph *g, const cf_model_config *c, int layer, cf_tensor *h, cf_tensor *rope) {
    cf_tensor *wq = cf_model_weight(g, c, WR_WQ, layer), *wk = cf_model_weight(g, c, WR_WK, layer);
    cf_tensor *wv = cf_model_weight(g, c, WR_WV, layer), *wo = cf_model_weight(g, c, WR_WO, layer);
    cf_tensor *q = cf_nn_rope(g, cf_model_split_heads(g, cf_nn_linear(g, h, wq, NULL), c->num_heads), rope);
    cf_tensor *k = cf_nn_rope(g, cf_model_split_heads(g, cf_nn_linear(g, h, wk, NULL), c->num_kv_heads), rope);
    cf_tensor *v = cf_model_split_heads(g, cf_nn_linear(g, h, wv, NULL), c->num_kv_heads);
    cf_tensor *a = c->use_flash_attention ? cf_nn_flash_attention(g, q, k, v) : cf_nn_attention(g, q, k, v);
    return cf_nn_linear(g, cf_model_merge_heads(g, a), wo, NULL);
}

static cf_tensor *mlp_block(cf_graph *g, const cf_model_config *c, int layer, cf_tensor *h) {
    cf_tensor *wg = cf_model_weight(g, c, WR_GATE, layer), *wu = cf_model_weight(g, c, WR_UP, layer);
    cf_tensor *wd = cf_model_weight(g, c, WR_DOWN, layer);
    cf_tensor *act = cf_nn_swiglu(g, cf_nn_linear(g, h, wg, NULL), cf_nn_linear(g, h, wu, NULL));
    return cf_nn_linear(g, act, wd, NULL);
}

cf_tensor *cf_llama_forward(const cf_model_config *c, int64_t batch, int64_t seq_len, cf_model_graph *out) {
    (void)batch;
    cf_graph *g = out->graph;
    float eps = (float)c->rms_norm_eps;
    cf_tensor *embed = cf_model_weight(g, c, WR_EMBED, 0);
    cf_rope_config rope_cfg = {.head_dim = cf_model_head_dim(c), .max_positions = seq_len, .theta = c->rope_theta,
                               .scaling_factor = c->rope_scaling_factor, .low_freq_factor = c->rope_low_freq_factor,
                               .high_freq_factor = c->rope_high_freq_factor,
                               .original_max_position = c->rope_original_max_position};
    cf_tensor *rope = cf_nn_rope_table(g, &rope_cfg);
    cf_tensor *x = cf_nn_embedding(g, embed, out->tokens);
    for (int i = 0; i < c->num_layers; i++) {
        cf_tensor *ln1 = cf_model_weight(g, c, WR_ATTN_NORM, i);
        x = cf_nn_add(g, x, attention_block(g, c, i, cf_nn_rmsnorm(g, x, ln1, eps), rope));
        cf_tensor *ln2 = cf_model_weight(g, c, WR_FFN_NORM, i);
        x = cf_nn_add(g, x, mlp_block(g, c, i, cf_nn_rmsnorm(g, x, ln2, eps)));
    }
    x = cf_nn_rmsnorm(g, x, cf_model_weight(g, c, WR_FINAL_NORM, 0), eps);
    cf_tensor *head = c->tie_word_embeddings ? embed : cf_model_weight(g, c, WR_LM_HEAD, 0);
    return cf_nn_linear(g, x, head, NULL);
}
