/* The LLaMA training graph: pre-norm decoder blocks with RMSNorm, RoPE (interleaved
 * pairs), causal grouped-query attention and a SwiGLU MLP, no biases; the output head
 * is the embedding when tie_word_embeddings. Names follow Hugging Face. */
#include "cformers/fused.h"
#include "models/model_graphs.h"

typedef struct llama_dims {
    int64_t d, hd, kv_dim, ff, vocab;
    float eps;
    cf_init w; /* normal(0, initializer_range) */
} llama_dims;

static cf_tensor *attention_block(cf_graph *g, const cf_model_config *c, const llama_dims *d, int layer, cf_tensor *h,
                                  cf_tensor *rope) {
    int64_t q_shape[2] = {d->d, d->d}, kv_shape[2] = {d->kv_dim, d->d};
    const char *p = "model.layers.%d.self_attn.%s_proj.weight";
    cf_tensor *wq = cf_model_param(g, 2, q_shape, d->w, true, p, layer, "q");
    cf_tensor *wk = cf_model_param(g, 2, kv_shape, d->w, true, p, layer, "k");
    cf_tensor *wv = cf_model_param(g, 2, kv_shape, d->w, true, p, layer, "v");
    cf_tensor *wo = cf_model_param(g, 2, q_shape, d->w, true, p, layer, "o");
    cf_tensor *q = cf_nn_rope(g, cf_model_split_heads(g, cf_nn_linear(g, h, wq, NULL), c->num_heads), rope);
    cf_tensor *k = cf_nn_rope(g, cf_model_split_heads(g, cf_nn_linear(g, h, wk, NULL), c->num_kv_heads), rope);
    cf_tensor *v = cf_model_split_heads(g, cf_nn_linear(g, h, wv, NULL), c->num_kv_heads);
    cf_tensor *a = c->use_flash_attention ? cf_nn_flash_attention(g, q, k, v) : cf_nn_attention(g, q, k, v);
    return cf_nn_linear(g, cf_model_merge_heads(g, a), wo, NULL);
}

static cf_tensor *mlp_block(cf_graph *g, const llama_dims *d, int layer, cf_tensor *h) {
    int64_t in_shape[2] = {d->ff, d->d}, out_shape[2] = {d->d, d->ff};
    const char *p = "model.layers.%d.mlp.%s_proj.weight";
    cf_tensor *wg = cf_model_param(g, 2, in_shape, d->w, true, p, layer, "gate");
    cf_tensor *wu = cf_model_param(g, 2, in_shape, d->w, true, p, layer, "up");
    cf_tensor *wd = cf_model_param(g, 2, out_shape, d->w, true, p, layer, "down");
    cf_tensor *act = cf_nn_swiglu(g, cf_nn_linear(g, h, wg, NULL), cf_nn_linear(g, h, wu, NULL));
    return cf_nn_linear(g, act, wd, NULL);
}

cf_tensor *cf_llama_forward(const cf_model_config *c, int64_t batch, int64_t seq_len, cf_model_graph *out) {
    cf_graph *g = out->graph;
    llama_dims d = {.d = c->hidden_size, .hd = cf_model_head_dim(c), .ff = c->intermediate_size,
                    .vocab = c->vocab_size, .eps = (float)c->rms_norm_eps,
                    .w = cf_init_normal((float)c->initializer_range)};
    d.kv_dim = c->num_kv_heads * d.hd;
    int64_t embed_shape[2] = {d.vocab, d.d}, norm_shape[1] = {d.d};
    cf_tensor *embed = cf_model_param(g, 2, embed_shape, d.w, false, "model.embed_tokens.weight");
    cf_rope_config rope_cfg = {.head_dim = d.hd, .max_positions = seq_len, .theta = c->rope_theta,
                               .scaling_factor = c->rope_scaling_factor, .low_freq_factor = c->rope_low_freq_factor,
                               .high_freq_factor = c->rope_high_freq_factor,
                               .original_max_position = c->rope_original_max_position};
    cf_tensor *rope = cf_nn_rope_table(g, &rope_cfg);
    cf_tensor *x = cf_nn_embedding(g, embed, out->tokens);
    for (int i = 0; i < c->num_layers; i++) {
        cf_tensor *ln1 = cf_model_param(g, 1, norm_shape, cf_init_ones(), false, "model.layers.%d.input_layernorm.weight", i);
        x = cf_nn_add(g, x, attention_block(g, c, &d, i, cf_nn_rmsnorm(g, x, ln1, d.eps), rope));
        cf_tensor *ln2 =
            cf_model_param(g, 1, norm_shape, cf_init_ones(), false, "model.layers.%d.post_attention_layernorm.weight", i);
        x = cf_nn_add(g, x, mlp_block(g, &d, i, cf_nn_rmsnorm(g, x, ln2, d.eps)));
    }
    cf_tensor *norm = cf_model_param(g, 1, norm_shape, cf_init_ones(), false, "model.norm.weight");
    x = cf_nn_rmsnorm(g, x, norm, d.eps);
    cf_tensor *head = c->tie_word_embeddings ? embed : cf_model_param(g, 2, embed_shape, d.w, true, "lm_head.weight");
    return cf_nn_linear(g, x, head, NULL);
}
