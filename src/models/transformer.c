/* The training graph of every family: the family's block program (family.h,
 * cf_block_program_compile) emitted as graph ops, step by step, with its parameters
 * (names as in Hugging Face, shapes, initialisation, decay) from the tensor table.
 *   LLaMA: RMSNorm, RoPE (interleaved pairs) on q and k, grouped-query attention, SwiGLU,
 *          no biases, head tied to the embedding when tie_word_embeddings;
 *   GPT-2: LayerNorm, learned positions added to the embeddings, one c_attn projection
 *          split into q, k, v after the matmul, GELU(tanh), biases, tied head;
 *   Qwen2: LLaMA's with q, k, v biases and RoPE in NEOX halves;
 *   Qwen3: Qwen2's without biases, each q and k head RMS-normed before the rotary;
 *   Gemma 2: (1 + w) RMSNorms before and after each sublayer, GeGLU, embeddings times
 *          sqrt(hidden), local and global layers (cf_block_layer_mask), logits soft-capped;
 *   Phi-3: LLaMA's with one product for q, k, v and one for gate, up.
 * src/infer/block.c interprets the same program over a KV cache. */
#include <math.h>
#include <stdlib.h>
#include <stdio.h>

#include "cformers/fused.h"
#include "dist/tensor_parallel.h"
#include "kernels/graph_ops.h"
#include "models/lora.h"
#include "models/model_graphs.h"
#include "models/tensor_parallel.h"

typedef struct builder {
    cf_graph *g;
    const cf_model_config *c;
    cf_tensor *rope; /* the RoPE table, when the program rotates */
    cf_tensor *rope_local; /* the local layers' table (Gemma 3), when the program has one */
    cf_tensor *ones[2]; /* (1 + w) norms: ones [hidden_size], [head_dim], made on first use */
    const cf_lora_config *lora; /* adapters on the linears it targets, or NULL */
    const cf_dist_group *tensor_group; /* tensor parallelism's ranks, or NULL */
    cf_tp_part tp;                     /* this rank's part of every cut tensor */
    /* the program's values: [B, T, width]; Q, K, V split into heads [B, T, heads, hd] */
    cf_tensor *slot[CF_SLOT_COUNT];
} builder;

static cf_tensor *weight(const builder *b, cf_weight_role role, int layer) {
    return role == CF_NO_WEIGHT ? NULL : cf_model_weight_part(b->g, b->c, role, layer, b->tp);
}

/* 1 + w of a norm's weight (Gemma; HF's (1 + w.float())). */
static cf_tensor *one_plus(builder *b, cf_weight_role role, int layer) {
    cf_tensor *w = weight(b, role, layer);
    if (!w) return NULL;
    int which = w->shape[0] == b->c->hidden_size ? 0 : 1;
    if (!b->ones[which]) {
        int64_t n = w->shape[0];
        float *one = cf_xmalloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) one[i] = 1.0f;
        char name[64];
        snprintf(name, sizeof name, "norm_offset_ones.%lld", (long long)n);
        b->ones[which] = cf_graph_const(b->g, name, CF_F32, 1, &n, one);
        free(one);
    }
    return cf_nn_add(b->g, w, b->ones[which]);
}

/* A norm's weight as the step applies it: w, or 1 + w. The parameter is created here, in
 * the table's order; its 1 + w node comes after the residual add before the norm, which
 * the residual-norm fusion therefore leaves unfused (pass_residual_norm.c). */
static cf_tensor *norm_weight(builder *b, const cf_block_step *s, cf_weight_role role, int layer) {
    return s->norm_offset ? one_plus(b, role, layer) : weight(b, role, layer);
}

static cf_tensor *norm(builder *b, const cf_block_step *s, int layer) {
    cf_tensor *w = norm_weight(b, s, s->weight[0], layer), *x = b->slot[s->in];
    float eps = (float)b->c->rms_norm_eps;
    switch (s->norm) {
    case CF_NORM_RMS: return cf_nn_rmsnorm(b->g, x, w, eps);
    case CF_NORM_LAYER: return cf_nn_layernorm(b->g, x, w, weight(b, s->bias[0], layer), eps);
    }
    return NULL;
}

/* Q, K, V are kept split into heads (the attention ops' layout): this rank's share of
 * them under tensor parallelism. */
static void set_output(builder *b, cf_slot slot, cf_tensor *t) {
    const cf_model_config *c = b->c;
    if (slot == CF_SLOT_Q) t = cf_model_split_heads(b->g, t, c->num_heads / b->tp.parts);
    else if (slot == CF_SLOT_K || slot == CF_SLOT_V) t = cf_model_split_heads(b->g, t, c->num_kv_heads / b->tp.parts);
    b->slot[slot] = t;
}

/* The linear x W^T (+ bias) of `role`, with its low-rank adapter when the config targets
 * it (llama.cpp's build_lora_mm): + s (x A^T) B^T, A [rank, in], B [out, rank], B zero at
 * the start so the adapted model starts as the base. x [B, T, in] -> [B, T, out]. */
static cf_tensor *linear_of(builder *b, cf_tensor *x, cf_weight_role role, cf_weight_role bias, int layer) {
    cf_tensor *w = weight(b, role, layer), *y = cf_nn_linear(b->g, x, w, weight(b, bias, layer));
    const cf_family *f = cf_family_of(b->c->arch);
    if (!w || !cf_lora_targets(b->lora, f, role, layer)) return y;
    const cf_family_weight *fw = cf_family_weight_of(f, role);
    int64_t r = b->lora->rank, a_shape[2] = {r, w->shape[1]}, b_shape[2] = {w->shape[0], r};
    char name[CF_NAME_MAX];
    cf_init init = b->lora->init == CF_LORA_INIT_NORMAL ? cf_init_normal(1.0f / (float)r)
                                                        : cf_init_uniform(1.0f / sqrtf((float)w->shape[1]));
    cf_lora_tensor_name(fw, layer, 'A', name, sizeof name);
    cf_tensor *A = cf_graph_param(b->g, name, 2, a_shape, init, true);
    cf_lora_tensor_name(fw, layer, 'B', name, sizeof name);
    cf_tensor *B = cf_graph_param(b->g, name, 2, b_shape, cf_init_zeros(), true);
    cf_tensor *delta = cf_nn_linear(b->g, cf_nn_linear(b->g, x, A, NULL), B, NULL);
    double scale = cf_lora_scale(b->lora);
    return cf_nn_add(b->g, y, scale == 1.0 ? delta : cf_nn_scale(b->g, delta, (float)scale));
}

/* How tensor parallelism cuts the step's projections (its first weight says, or the
 * fused one): column-parallel, row-parallel or not at all. */
static cf_tp_split step_split(const builder *b, const cf_block_step *s) {
    if (b->tp.parts <= 1) return CF_SPLIT_REPLICATED;
    const cf_family_weight *w =
        cf_family_weight_of(cf_family_of(b->c->arch), s->fused != CF_NO_WEIGHT ? s->fused : s->weight[0]);
    return w && cf_tp_cuts(w) ? w->split : CF_SPLIT_REPLICATED;
}

/* The step's projections; under tensor parallelism (Megatron's ColumnParallelLinear and
 * RowParallelLinear) a column-parallel group reads its input through tp_copy (its input
 * gradient summed over the tensor group in backward) and a row-parallel product is
 * summed over the group (tp_reduce) before its bias, which every rank holds whole. */
static void linear(builder *b, const cf_block_step *s, int layer) {
    cf_tensor *x = b->slot[s->in];
    cf_tp_split split = step_split(b, s);
    if (split == CF_SPLIT_ROW) {
        for (int i = 0; i < s->n_out; i++) {
            cf_tensor *y = cf_tp_reduce(b->g, linear_of(b, x, s->weight[i], CF_NO_WEIGHT, layer), b->tensor_group);
            cf_tensor *bias = weight(b, s->bias[i], layer);
            set_output(b, s->out[i], bias ? cf_nn_add_broadcast(b->g, y, bias) : y);
        }
        return;
    }
    if (split != CF_SPLIT_REPLICATED) x = cf_tp_copy(b->g, x, b->tensor_group);
    if (s->fused != CF_NO_WEIGHT) { /* one product over the stacked rows, split after it */
        cf_tensor *parts[3] = {0};
        /* this rank's heads of q, k, v (k and v narrower under GQA); gate, up: equal */
        int64_t hd = cf_model_head_dim(b->c), q = b->c->num_heads / b->tp.parts * hd,
                kv = b->c->num_kv_heads / b->tp.parts * hd;
        int64_t widths[3] = {q, kv, kv};
        cf_nn_split_widths(b->g, linear_of(b, x, s->fused, s->fused_bias, layer), s->n_out,
                           s->fused == WR_QKV ? widths : NULL, parts);
        for (int i = 0; i < s->n_out; i++) set_output(b, s->out[i], parts[i]);
        return;
    }
    for (int i = 0; i < s->n_out; i++) set_output(b, s->out[i], linear_of(b, x, s->weight[i], s->bias[i], layer));
}

static void step(builder *b, const cf_block_program *p, const cf_block_step *s, int layer) {
    cf_graph *g = b->g;
    switch (s->kind) {
    case CF_STEP_NORM: b->slot[s->out[0]] = norm(b, s, layer); break;
    case CF_STEP_LINEAR: linear(b, s, layer); break;
    case CF_STEP_HEAD_NORM: { /* RMSNorm over each [.., head_dim] row of Q [B, T, H, hd] and K */
        float eps = (float)b->c->rms_norm_eps;
        b->slot[CF_SLOT_Q] = cf_nn_rmsnorm(g, b->slot[CF_SLOT_Q], norm_weight(b, s, s->weight[0], layer), eps);
        b->slot[CF_SLOT_K] = cf_nn_rmsnorm(g, b->slot[CF_SLOT_K], norm_weight(b, s, s->weight[1], layer), eps);
        break;
    }
    case CF_STEP_ROTARY: { /* over the whole head (the compiler refuses partial rotary) */
        cf_tensor *(*rope)(cf_graph *, cf_tensor *, cf_tensor *) =
            s->rotary == CF_ROTARY_NEOX ? cf_nn_rope_neox : cf_nn_rope;
        cf_tensor *table = p->local_rope && cf_block_layer_local(p, layer) ? b->rope_local : b->rope;
        b->slot[CF_SLOT_Q] = rope(g, b->slot[CF_SLOT_Q], table);
        b->slot[CF_SLOT_K] = rope(g, b->slot[CF_SLOT_K], table);
        break;
    }
    case CF_STEP_SCALE_Q: b->slot[CF_SLOT_Q] = cf_nn_scale(g, b->slot[CF_SLOT_Q], s->scale); break;
    case CF_STEP_ATTENTION: {
        cf_tensor *q = b->slot[CF_SLOT_Q], *k = b->slot[CF_SLOT_K], *v = b->slot[CF_SLOT_V];
        cf_attn_mask mask = cf_block_layer_mask(p, s, layer);
        cf_tensor *a = b->c->use_flash_attention ? cf_nn_flash_attention_masked(g, q, k, v, &mask)
                                                 : cf_nn_attention_masked(g, q, k, v, &mask);
        b->slot[s->out[0]] = cf_model_merge_heads(g, a);
        break;
    }
    case CF_STEP_ACTIVATE:
        switch (s->act) {
        case CF_MLP_SWIGLU: b->slot[s->out[0]] = cf_nn_swiglu(g, b->slot[CF_SLOT_FF1], b->slot[CF_SLOT_FF2]); break;
        case CF_MLP_GELU: b->slot[s->out[0]] = cf_nn_gelu(g, b->slot[CF_SLOT_FF1]); break;
        case CF_MLP_GEGLU: b->slot[s->out[0]] = cf_nn_mul(g, cf_nn_gelu(g, b->slot[CF_SLOT_FF1]), b->slot[CF_SLOT_FF2]); break;
        }
        break;
    case CF_STEP_RESIDUAL: b->slot[CF_SLOT_X] = cf_nn_add(g, b->slot[CF_SLOT_X], b->slot[s->in]); break;
    }
}

/* Token embeddings, plus the learned position table (or the RoPE table for the blocks). */
static cf_tensor *embed(builder *b, const cf_block_program *p, int64_t seq_len, cf_tensor *tokens, cf_tensor **wte) {
    cf_graph *g = b->g;
    const cf_model_config *c = b->c;
    *wte = cf_model_weight(g, c, WR_EMBED, 0);
    if (!p->learned_positions) {
        cf_tensor *x = cf_nn_embedding(g, *wte, tokens);
        return p->embed_scale != 1 ? cf_nn_scale(g, x, p->embed_scale) : x;
    }
    cf_tensor *wpe = cf_model_weight(g, c, WR_POS_EMBED, 0);
    int32_t *positions = cf_xmalloc(sizeof(int32_t) * (size_t)seq_len);
    for (int64_t t = 0; t < seq_len; t++) positions[t] = (int32_t)t;
    cf_tensor *pos = cf_graph_const(g, "positions", CF_I32, 1, &seq_len, positions);
    free(positions);
    return cf_nn_add_broadcast(g, cf_nn_embedding(g, *wte, tokens), cf_nn_embedding(g, wpe, pos));
}

cf_tensor *cf_transformer_forward(const cf_model_config *c, int64_t batch, int64_t seq_len, cf_model_graph *out) {
    cf_block_program p;
    cf_error err = {{0}};
    if (cf_block_program_compile(c, &p, &err) != 0) return cf_graph_fail(out->graph, "%s", err.msg);
    return cf_transformer_forward_program(c, &p, batch, seq_len, out);
}

cf_tensor *cf_transformer_forward_program(const cf_model_config *c, const cf_block_program *p, int64_t batch,
                                          int64_t seq_len, cf_model_graph *out) {
    return cf_transformer_forward_layers(c, p, batch, seq_len, 0, (int)c->num_layers, NULL, out);
}

/* The RoPE table for every stage that holds blocks; then the embedding (first stage, x_in
 * NULL), blocks [lo, hi), and the final norm and head (when hi is the last layer). */
cf_tensor *cf_transformer_forward_layers(const cf_model_config *c, const cf_block_program *p, int64_t batch,
                                         int64_t seq_len, int lo, int hi, cf_tensor *x_in, cf_model_graph *out) {
    (void)batch;
    builder b = {.g = out->graph, .c = c, .lora = out->lora, .tensor_group = out->tensor_group,
                 .tp = {cf_dist_group_rank(out->tensor_group), cf_dist_group_size(out->tensor_group)}};
    if (p->rotary && hi > lo) {
        cf_rope_config rope = {.head_dim = cf_model_head_dim(c), .max_positions = seq_len, .theta = c->rope_theta,
                               .scaling_factor = c->rope_scaling_factor, .low_freq_factor = c->rope_low_freq_factor,
                               .high_freq_factor = c->rope_high_freq_factor,
                               .original_max_position = c->rope_original_max_position};
        b.rope = cf_nn_rope_table(b.g, &rope);
        if (p->local_rope) { /* local layers: their own base, no scaling (Gemma 3's sliding_attention) */
            cf_rope_config local = {.head_dim = rope.head_dim, .max_positions = seq_len, .theta = c->rope_local_theta};
            b.rope_local = cf_nn_rope_table(b.g, &local);
        }
    }
    cf_tensor *wte = NULL;
    b.slot[CF_SLOT_X] = x_in ? x_in : embed(&b, p, seq_len, out->tokens, &wte);
    for (int i = lo; i < hi; i++)
        for (int s = 0; s < p->n_steps; s++) step(&b, p, &p->steps[s], i);
    if (hi < c->num_layers) return b.slot[CF_SLOT_X];
    step(&b, p, &p->final_norm, 0);
    /* a tied head on a stage without the embedding holds its own copy of the table */
    cf_tensor *head = !c->tie_word_embeddings ? cf_model_weight(b.g, c, WR_LM_HEAD, 0)
                      : wte                   ? wte
                                              : cf_model_weight(b.g, c, WR_EMBED, 0);
    cf_tensor *logits = cf_nn_linear(b.g, b.slot[CF_SLOT_H], head, NULL);
    return p->logit_softcap != 0 ? cf_nn_softcap(b.g, logits, p->logit_softcap) : logits;
}
