/* The training graph of every family: a pre-norm decoder whose pieces come from the
 * family's block recipe (family.h) and whose parameters (names as in Hugging Face, shapes,
 * initialisation, decay) come from its tensor table.
 *   LLaMA: RMSNorm, RoPE (interleaved pairs) on q and k, grouped-query attention, SwiGLU,
 *          no biases, head tied to the embedding when tie_word_embeddings;
 *   GPT-2: LayerNorm, learned positions added to the embeddings, one c_attn projection
 *          split into q, k, v after the matmul, GELU(tanh), biases, tied head.
 * src/infer/block.c runs the same recipe over a KV cache. */
#include <stdlib.h>

#include "cformers/fused.h"
#include "models/model_graphs.h"

typedef struct builder {
    cf_graph *g;
    const cf_model_config *c;
    const cf_family *f;
    cf_tensor *rope; /* the RoPE table, with CF_POS_ROPE */
} builder;

/* x W^T (+ b when the family has the bias) with the weights of `role`. */
static cf_tensor *linear(const builder *b, cf_tensor *x, cf_weight_role role, int layer) {
    cf_tensor *w = cf_model_weight(b->g, b->c, role, layer);
    cf_tensor *bias = cf_family_has_bias(b->f, role) ? cf_model_weight(b->g, b->c, (cf_weight_role)(role + 1), layer) : NULL;
    return cf_nn_linear(b->g, x, w, bias);
}

static cf_tensor *norm(const builder *b, cf_tensor *x, cf_weight_role role, int layer) {
    cf_tensor *w = cf_model_weight(b->g, b->c, role, layer);
    float eps = (float)b->c->rms_norm_eps;
    switch (b->f->block.norm) {
    case CF_NORM_RMS: return cf_nn_rmsnorm(b->g, x, w, eps);
    case CF_NORM_LAYER: {
        cf_tensor *bias = cf_family_has_bias(b->f, role) ? cf_model_weight(b->g, b->c, (cf_weight_role)(role + 1), layer)
                                                        : NULL;
        return cf_nn_layernorm(b->g, x, w, bias, eps);
    }
    }
    return NULL;
}

/* [B, T, heads * hd] -> [B, T, heads, hd], rotated when the family uses RoPE. */
static cf_tensor *heads(const builder *b, cf_tensor *x, int64_t n, bool rotate) {
    cf_tensor *h = cf_model_split_heads(b->g, x, n);
    switch (b->f->block.position) {
    case CF_POS_ROPE: return rotate ? cf_nn_rope(b->g, h, b->rope) : h;
    case CF_POS_LEARNED: break;
    }
    return h;
}

static cf_tensor *attention(const builder *b, int i, cf_tensor *h) {
    cf_graph *g = b->g;
    const cf_model_config *c = b->c;
    cf_tensor *q, *k, *v;
    if (b->f->block.fused_qkv) { /* q, k, v rows one after another (num_kv_heads == num_heads) */
        cf_tensor *qkv[3] = {0};
        cf_nn_split(g, linear(b, h, WR_QKV, i), 3, qkv);
        q = heads(b, qkv[0], c->num_heads, true), k = heads(b, qkv[1], c->num_kv_heads, true);
        v = heads(b, qkv[2], c->num_kv_heads, false);
    } else {
        q = heads(b, linear(b, h, WR_WQ, i), c->num_heads, true);
        k = heads(b, linear(b, h, WR_WK, i), c->num_kv_heads, true);
        v = heads(b, linear(b, h, WR_WV, i), c->num_kv_heads, false);
    }
    cf_tensor *a = c->use_flash_attention ? cf_nn_flash_attention(g, q, k, v) : cf_nn_attention(g, q, k, v);
    return linear(b, cf_model_merge_heads(g, a), WR_WO, i);
}

static cf_tensor *mlp(const builder *b, int i, cf_tensor *h) {
    switch (b->f->block.mlp) {
    case CF_MLP_SWIGLU: {
        cf_tensor *gate = linear(b, h, WR_GATE, i);
        h = cf_nn_swiglu(b->g, gate, linear(b, h, WR_UP, i));
        break;
    }
    case CF_MLP_GELU: h = cf_nn_gelu(b->g, linear(b, h, WR_UP, i)); break;
    }
    return linear(b, h, WR_DOWN, i);
}

/* Token embeddings, plus the learned position table (or the RoPE table for the blocks). */
static cf_tensor *embed(builder *b, int64_t seq_len, cf_tensor *tokens, cf_tensor **wte) {
    cf_graph *g = b->g;
    const cf_model_config *c = b->c;
    *wte = cf_model_weight(g, c, WR_EMBED, 0);
    switch (b->f->block.position) {
    case CF_POS_ROPE: {
        cf_rope_config rope = {.head_dim = cf_model_head_dim(c), .max_positions = seq_len, .theta = c->rope_theta,
                               .scaling_factor = c->rope_scaling_factor, .low_freq_factor = c->rope_low_freq_factor,
                               .high_freq_factor = c->rope_high_freq_factor,
                               .original_max_position = c->rope_original_max_position};
        b->rope = cf_nn_rope_table(g, &rope);
        return cf_nn_embedding(g, *wte, tokens);
    }
    case CF_POS_LEARNED: {
        cf_tensor *wpe = cf_model_weight(g, c, WR_POS_EMBED, 0);
        int32_t *positions = cf_xmalloc(sizeof(int32_t) * (size_t)seq_len);
        for (int64_t t = 0; t < seq_len; t++) positions[t] = (int32_t)t;
        cf_tensor *pos = cf_graph_const(g, "positions", CF_I32, 1, &seq_len, positions);
        free(positions);
        return cf_nn_add_broadcast(g, cf_nn_embedding(g, *wte, tokens), cf_nn_embedding(g, wpe, pos));
    }
    }
    return NULL;
}

cf_tensor *cf_transformer_forward(const cf_model_config *c, int64_t batch, int64_t seq_len, cf_model_graph *out) {
    (void)batch;
    builder b = {.g = out->graph, .c = c, .f = cf_family_of(c->arch)};
    cf_tensor *wte, *x = embed(&b, seq_len, out->tokens, &wte);
    for (int i = 0; i < c->num_layers; i++) {
        x = cf_nn_add(b.g, x, attention(&b, i, norm(&b, x, WR_ATTN_NORM, i)));
        x = cf_nn_add(b.g, x, mlp(&b, i, norm(&b, x, WR_FFN_NORM, i)));
    }
    x = norm(&b, x, WR_FINAL_NORM, 0);
    cf_tensor *head = c->tie_word_embeddings ? wte : cf_model_weight(b.g, c, WR_LM_HEAD, 0);
    return cf_nn_linear(b.g, x, head, NULL);
}
