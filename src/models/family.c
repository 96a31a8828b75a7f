/* The family table: LLaMA, GPT-2, Qwen2, Mistral, Qwen3, each described once (family.h). */
#include "models/family.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/checked.h"
#include "models/model_graphs.h"

/* ---- LLaMA: RMSNorm, RoPE (interleaved pairs), GQA, SwiGLU, no biases ---- */

/* The rows of the LLaMA-shaped tables (LLaMA, Qwen2, Qwen3 share names and shapes);
 * ROPE_Q / ROPE_K: how HF orders the q / k rows (rotate-half order to be permuted into
 * interleaved pairs, or as is when the family rotates NEOX halves). */
#define LLAMA_EMBED                                                                                                    \
    {WR_EMBED, WP_FIRST, 2, {WD_VOCAB, WD_HIDDEN}, WI_NORMAL, false, HF_AS_IS, "model.embed_tokens.weight",          \
     "token_embd.weight", CF_SPLIT_VOCAB}
#define LLAMA_ATTN_NORM                                                                                                \
    {WR_ATTN_NORM, WP_LAYER, 1, {WD_HIDDEN}, WI_ONES, false, HF_AS_IS, "model.layers.%ld.input_layernorm.weight",     \
     "blk.%ld.attn_norm.weight", CF_SPLIT_REPLICATED}
#define LLAMA_Q(ROPE_Q)                                                                                                \
    {WR_WQ, WP_LAYER, 2, {WD_Q, WD_HIDDEN}, WI_NORMAL, true, ROPE_Q, "model.layers.%ld.self_attn.q_proj.weight",      \
     "blk.%ld.attn_q.weight", CF_SPLIT_COLUMN}
#define LLAMA_K(ROPE_K)                                                                                                \
    {WR_WK, WP_LAYER, 2, {WD_KV, WD_HIDDEN}, WI_NORMAL, true, ROPE_K, "model.layers.%ld.self_attn.k_proj.weight",     \
     "blk.%ld.attn_k.weight", CF_SPLIT_COLUMN}
#define LLAMA_V                                                                                                        \
    {WR_WV, WP_LAYER, 2, {WD_KV, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.self_attn.v_proj.weight",   \
     "blk.%ld.attn_v.weight", CF_SPLIT_COLUMN}
#define LLAMA_REST                                                                                                     \
    {WR_WO, WP_LAYER, 2, {WD_HIDDEN, WD_Q}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.self_attn.o_proj.weight",    \
     "blk.%ld.attn_output.weight", CF_SPLIT_ROW},                                                                      \
    {WR_FFN_NORM, WP_LAYER, 1, {WD_HIDDEN}, WI_ONES, false, HF_AS_IS,                                                  \
     "model.layers.%ld.post_attention_layernorm.weight", "blk.%ld.ffn_norm.weight", CF_SPLIT_REPLICATED},              \
    {WR_GATE, WP_LAYER, 2, {WD_FF, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.mlp.gate_proj.weight",    \
     "blk.%ld.ffn_gate.weight", CF_SPLIT_COLUMN},                                                                      \
    {WR_UP, WP_LAYER, 2, {WD_FF, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.mlp.up_proj.weight",        \
     "blk.%ld.ffn_up.weight", CF_SPLIT_COLUMN},                                                                        \
    {WR_DOWN, WP_LAYER, 2, {WD_HIDDEN, WD_FF}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.mlp.down_proj.weight",    \
     "blk.%ld.ffn_down.weight", CF_SPLIT_ROW},                                                                         \
    {WR_FINAL_NORM, WP_LAST, 1, {WD_HIDDEN}, WI_ONES, false, HF_AS_IS, "model.norm.weight", "output_norm.weight",     \
     CF_SPLIT_REPLICATED},                                                                                             \
    {WR_LM_HEAD, WP_UNTIED, 2, {WD_VOCAB, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "lm_head.weight", "output.weight",   \
     CF_SPLIT_VOCAB}

/* The config.json keys of the LLaMA-like families (LLaMA, Qwen2, Qwen3, Mistral): the same
 * names, untied by default, only model_type and the architecture class differ. */
#define LLAMA_HF_KEYS(type, cls)                                                                                       \
    {.model_type = type, .architecture = cls, .act_key = "hidden_act", .act = "silu", .vocab = "vocab_size",          \
     .hidden = "hidden_size", .ff = "intermediate_size", .layers = "num_hidden_layers",                              \
     .heads = "num_attention_heads", .kv_heads = "num_key_value_heads", .max_pos = "max_position_embeddings",         \
     .eps = "rms_norm_eps", .tie_default = false, .strip_prefix = NULL}

static const cf_family_weight llama_weights[] = {
    LLAMA_EMBED, LLAMA_ATTN_NORM, LLAMA_Q(HF_ROPE_Q), LLAMA_K(HF_ROPE_K), LLAMA_V, LLAMA_REST};

/* ---- Qwen2 / Qwen2.5: LLaMA's block with q, k, v biases and rotary in NEOX halves (HF's
 * rows as they are, as llama.cpp's qwen2 keeps them) ---- */

static const cf_family_weight qwen2_weights[] = {
    LLAMA_EMBED,
    LLAMA_ATTN_NORM,
    LLAMA_Q(HF_AS_IS),
    {WR_WQ_BIAS, WP_LAYER, 1, {WD_Q}, WI_ZEROS, false, HF_AS_IS, "model.layers.%ld.self_attn.q_proj.bias",
     "blk.%ld.attn_q.bias", CF_SPLIT_COLUMN},
    LLAMA_K(HF_AS_IS),
    {WR_WK_BIAS, WP_LAYER, 1, {WD_KV}, WI_ZEROS, false, HF_AS_IS, "model.layers.%ld.self_attn.k_proj.bias",
     "blk.%ld.attn_k.bias", CF_SPLIT_COLUMN},
    LLAMA_V,
    {WR_WV_BIAS, WP_LAYER, 1, {WD_KV}, WI_ZEROS, false, HF_AS_IS, "model.layers.%ld.self_attn.v_proj.bias",
     "blk.%ld.attn_v.bias", CF_SPLIT_COLUMN},
    LLAMA_REST,
};

static const char *llama_check(const cf_model_config *m, char *msg, size_t cap) {
    if (cf_model_head_dim(m) % 2)
        return snprintf(msg, cap, "head_dim %lld (head_dim, else hidden_size / num_heads) must be even for RoPE",
                        (long long)cf_model_head_dim(m)),
               m->head_dim ? "head_dim" : "num_heads";
    if (!(m->rope_theta > 0 && isfinite(m->rope_theta)))
        return snprintf(msg, cap, "rope_theta %g must be positive and finite", m->rope_theta), "rope_theta";
    bool scaled = m->rope_scaling_factor != 0 && m->rope_scaling_factor != 1;
    if (scaled && !(m->rope_scaling_factor > 0 && isfinite(m->rope_scaling_factor) && m->rope_original_max_position > 0 &&
                    m->rope_low_freq_factor > 0 && m->rope_high_freq_factor > m->rope_low_freq_factor &&
                    isfinite(m->rope_high_freq_factor)))
        return snprintf(msg, cap,
                        "rope_scaling factor %g needs original_max_position_embeddings > 0 and 0 < low_freq_factor < "
                        "high_freq_factor (got %lld, %g, %g)",
                        m->rope_scaling_factor, (long long)m->rope_original_max_position, m->rope_low_freq_factor,
                        m->rope_high_freq_factor),
               "rope_scaling_factor";
    return NULL;
}

/* a * b of config sizes, or -1 when either is negative or the product passes INT64_MAX
 * (hostile configs: the checks that follow refuse -1, and no signed product overflows). */
static int64_t size_product(int64_t a, int64_t b) {
    size_t r;
    return a >= 0 && b >= 0 && cf_mul_size((uint64_t)a, (uint64_t)b, &r) && r <= INT64_MAX ? (int64_t)r : -1;
}

/* 2/3 of 4 hidden, times ffn_dim_multiplier, rounded up to a multiple of multiple_of; -1
 * when that passes INT64_MAX. */
static int64_t llama_default_ff(const cf_model_config *m) {
    int64_t ffn = size_product(8, m->hidden_size), multiple = m->multiple_of > 0 ? m->multiple_of : 256;
    if (ffn < 0) return -1;
    ffn /= 3;
    if (m->ffn_dim_multiplier > 0) {
        double scaled = m->ffn_dim_multiplier * (double)ffn;
        if (!(scaled < 0x1p63)) return -1;
        ffn = (int64_t)scaled;
    }
    size_t up;
    if (!cf_add_size((uint64_t)ffn, (uint64_t)multiple - 1, &up) || up > INT64_MAX) return -1;
    return (int64_t)up / multiple * multiple;
}

static cf_saved_terms llama_saved(const cf_model_config *m, bool recomputed) {
    double d = (double)m->hidden_size, ffn = (double)m->intermediate_size;
    double kv = (double)m->num_kv_heads * (double)cf_model_head_dim(m);
    /* input, attention_norm out, q, k, v (k, v at the GQA width), attention out, residual,
     * ffn_norm out; gate, up, SwiGLU out (select_recompute rebuilds the last). Norm
     * statistics: 1/rms of the two norms. */
    cf_saved_terms e = {.compute = 6 * d + 2 * kv + (recomputed ? 2 : 3) * ffn, .f32 = 2};
    /* Mixed precision (docs/precision.md) keeps the block input and the residual sum f32;
     * with bf16 attention writes its output in bf16; with f16 (attention runs f32) the
     * output and q, k, v are f32, plus the output's f16 copy for its product. */
    if (m->compute_dtype != CF_F32) {
        double f32 = 2 * d + (m->compute_dtype == CF_F16 ? 2 * d + 2 * kv : 0);
        e.compute += (m->compute_dtype == CF_F16 ? d : 0) - f32;
        e.f32 += f32;
    }
    return e;
}

/* ---- GPT-2: learned positions, LayerNorm, fused q/k/v, GELU(tanh), biases, tied head ---- */

static const cf_family_weight gpt2_weights[] = {
    {WR_EMBED, WP_FIRST, 2, {WD_VOCAB, WD_HIDDEN}, WI_NORMAL, false, HF_AS_IS, "transformer.wte.weight",
     "token_embd.weight", CF_SPLIT_VOCAB},
    {WR_POS_EMBED, WP_FIRST, 2, {WD_POS, WD_HIDDEN}, WI_NORMAL, false, HF_AS_IS, "transformer.wpe.weight",
     "position_embd.weight", CF_SPLIT_REPLICATED},
    {WR_ATTN_NORM, WP_LAYER, 1, {WD_HIDDEN}, WI_ONES, false, HF_AS_IS, "transformer.h.%ld.ln_1.weight",
     "blk.%ld.attn_norm.weight", CF_SPLIT_REPLICATED},
    {WR_ATTN_NORM_BIAS, WP_LAYER, 1, {WD_HIDDEN}, WI_ZEROS, false, HF_AS_IS, "transformer.h.%ld.ln_1.bias",
     "blk.%ld.attn_norm.bias", CF_SPLIT_REPLICATED},
    {WR_QKV, WP_LAYER, 2, {WD_QKV, WD_HIDDEN}, WI_NORMAL, true, HF_CONV1D, "transformer.h.%ld.attn.c_attn.weight",
     "blk.%ld.attn_qkv.weight", CF_SPLIT_COLUMN_QKV},
    {WR_QKV_BIAS, WP_LAYER, 1, {WD_QKV}, WI_ZEROS, false, HF_AS_IS, "transformer.h.%ld.attn.c_attn.bias",
     "blk.%ld.attn_qkv.bias", CF_SPLIT_COLUMN_QKV},
    {WR_WO, WP_LAYER, 2, {WD_HIDDEN, WD_HIDDEN}, WI_NORMAL_RESIDUAL, true, HF_CONV1D,
     "transformer.h.%ld.attn.c_proj.weight", "blk.%ld.attn_output.weight", CF_SPLIT_ROW},
    {WR_WO_BIAS, WP_LAYER, 1, {WD_HIDDEN}, WI_ZEROS, false, HF_AS_IS, "transformer.h.%ld.attn.c_proj.bias",
     "blk.%ld.attn_output.bias", CF_SPLIT_REPLICATED},
    {WR_FFN_NORM, WP_LAYER, 1, {WD_HIDDEN}, WI_ONES, false, HF_AS_IS, "transformer.h.%ld.ln_2.weight",
     "blk.%ld.ffn_norm.weight", CF_SPLIT_REPLICATED},
    {WR_FFN_NORM_BIAS, WP_LAYER, 1, {WD_HIDDEN}, WI_ZEROS, false, HF_AS_IS, "transformer.h.%ld.ln_2.bias",
     "blk.%ld.ffn_norm.bias", CF_SPLIT_REPLICATED},
    {WR_UP, WP_LAYER, 2, {WD_FF, WD_HIDDEN}, WI_NORMAL, true, HF_CONV1D, "transformer.h.%ld.mlp.c_fc.weight",
     "blk.%ld.ffn_up.weight", CF_SPLIT_COLUMN},
    {WR_UP_BIAS, WP_LAYER, 1, {WD_FF}, WI_ZEROS, false, HF_AS_IS, "transformer.h.%ld.mlp.c_fc.bias",
     "blk.%ld.ffn_up.bias", CF_SPLIT_COLUMN},
    {WR_DOWN, WP_LAYER, 2, {WD_HIDDEN, WD_FF}, WI_NORMAL_RESIDUAL, true, HF_CONV1D,
     "transformer.h.%ld.mlp.c_proj.weight", "blk.%ld.ffn_down.weight", CF_SPLIT_ROW},
    {WR_DOWN_BIAS, WP_LAYER, 1, {WD_HIDDEN}, WI_ZEROS, false, HF_AS_IS, "transformer.h.%ld.mlp.c_proj.bias",
     "blk.%ld.ffn_down.bias", CF_SPLIT_REPLICATED},
    {WR_FINAL_NORM, WP_LAST, 1, {WD_HIDDEN}, WI_ONES, false, HF_AS_IS, "transformer.ln_f.weight",
     "output_norm.weight", CF_SPLIT_REPLICATED},
    {WR_FINAL_NORM_BIAS, WP_LAST, 1, {WD_HIDDEN}, WI_ZEROS, false, HF_AS_IS, "transformer.ln_f.bias",
     "output_norm.bias", CF_SPLIT_REPLICATED},
    {WR_LM_HEAD, WP_UNTIED, 2, {WD_VOCAB, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "lm_head.weight", "output.weight", CF_SPLIT_VOCAB},
};

static const char *gpt2_check(const cf_model_config *m, char *msg, size_t cap) {
    if (m->num_kv_heads != m->num_heads)
        return snprintf(msg, cap, "gpt2 has no grouped-query attention: must equal num_heads %lld",
                        (long long)m->num_heads),
               "num_kv_heads";
    return NULL;
}

static int64_t gpt2_default_ff(const cf_model_config *m) { return size_product(4, m->hidden_size); }

static cf_saved_terms gpt2_saved(const cf_model_config *m, bool recomputed) {
    double d = (double)m->hidden_size, ffn = (double)m->intermediate_size;
    /* input, ln_1 out, q, k, v, attention out, residual, ln_2 out; c_fc out, GELU out
     * (select_recompute rebuilds the last). Norm statistics: mean and 1/std of ln_1, ln_2. */
    cf_saved_terms e = {.compute = 8 * d + (recomputed ? 1 : 2) * ffn, .f32 = 4};
    /* Mixed precision: as LLaMA's, and the c_fc output (GELU reads it) stays f32. */
    if (m->compute_dtype != CF_F32) {
        double f32 = 2 * d + ffn + (m->compute_dtype == CF_F16 ? 4 * d : 0);
        e.compute += (m->compute_dtype == CF_F16 ? d : 0) - f32;
        e.f32 += f32;
    }
    return e;
}

#define COUNT(a) (int)(sizeof a / sizeof a[0])

static const cf_family llama_family = {
    .arch = CF_ARCH_LLAMA,
    .name = "llama",
    .weights = llama_weights,
    .n_weights = COUNT(llama_weights),
    .check = llama_check,
    .default_ff = llama_default_ff,
    .block = {.norm = CF_NORM_RMS, .norm_place = CF_NORM_PRE, .position = CF_POS_ROPE,
              .rotary = CF_ROTARY_INTERLEAVED, .rotary_fraction = 1, .mlp = CF_MLP_SWIGLU, .fused_qkv = false,
              .bias = {.norm = false, .qkv = false, .out = false, .up = false, .down = false}},
    .forward = cf_transformer_forward,
    .block_saved = llama_saved,
    .hf = LLAMA_HF_KEYS("llama", "LlamaForCausalLM"),
    .mf_model_classes = {"LlamaForCausalLM", NULL},
    .mf_config_class = "LlamaConfig",
    .gguf_arch = "llama",
};

static const cf_family gpt2_family = {
    .arch = CF_ARCH_GPT2,
    .name = "gpt2",
    .weights = gpt2_weights,
    .n_weights = COUNT(gpt2_weights),
    .check = gpt2_check,
    .default_ff = gpt2_default_ff,
    .block = {.norm = CF_NORM_LAYER, .norm_place = CF_NORM_PRE, .position = CF_POS_LEARNED, .mlp = CF_MLP_GELU,
              .fused_qkv = true, .bias = {.norm = true, .qkv = true, .out = true, .up = true, .down = true}},
    .forward = cf_transformer_forward,
    .block_saved = gpt2_saved,
    .hf = {.model_type = "gpt2", .architecture = "GPT2LMHeadModel", .act_key = "activation_function",
           .act = "gelu_new", .vocab = "vocab_size",
           .hidden = "n_embd", .ff = "n_inner", .layers = "n_layer", .heads = "n_head", .kv_heads = NULL,
           .max_pos = "n_positions", .eps = "layer_norm_epsilon", .tie_default = true,
           .strip_prefix = "transformer."},
    .mf_model_classes = {"GPT2LMHeadModel", "GPT2ForCausalLM", NULL},
    .mf_config_class = "GPT2Config",
    .gguf_arch = "gpt2",
};

static const cf_family qwen2_family = {
    .arch = CF_ARCH_QWEN2,
    .name = "qwen2",
    .weights = qwen2_weights,
    .n_weights = COUNT(qwen2_weights),
    .check = llama_check,
    .default_ff = llama_default_ff,
    .block = {.norm = CF_NORM_RMS, .norm_place = CF_NORM_PRE, .position = CF_POS_ROPE, .rotary = CF_ROTARY_NEOX,
              .rotary_fraction = 1, .mlp = CF_MLP_SWIGLU, .fused_qkv = false,
              .bias = {.norm = false, .qkv = true, .out = false, .up = false, .down = false}},
    .forward = cf_transformer_forward,
    .block_saved = llama_saved, /* the biases add no saved values */
    .hf = LLAMA_HF_KEYS("qwen2", "Qwen2ForCausalLM"),
    .mf_model_classes = {"Qwen2ForCausalLM", NULL},
    .mf_config_class = "Qwen2Config",
    .gguf_arch = "qwen2",
};

/* ---- Qwen3: Qwen2's block without biases, q and k RMS-normed per head before the rotary,
 * head_dim independent of hidden_size / num_heads ---- */

/* Qwen3's and Gemma 3's RMSNorm of each q and k head (init: ones, or zeros for (1 + w)). */
#define QK_NORMS(init)                                                                                                 \
    {WR_Q_NORM, WP_LAYER, 1, {WD_HEAD}, init, false, HF_AS_IS, "model.layers.%ld.self_attn.q_norm.weight",            \
     "blk.%ld.attn_q_norm.weight", CF_SPLIT_REPLICATED},                                                               \
    {WR_K_NORM, WP_LAYER, 1, {WD_HEAD}, init, false, HF_AS_IS, "model.layers.%ld.self_attn.k_norm.weight",            \
     "blk.%ld.attn_k_norm.weight", CF_SPLIT_REPLICATED}

static const cf_family_weight qwen3_weights[] = {
    LLAMA_EMBED,
    LLAMA_ATTN_NORM,
    LLAMA_Q(HF_AS_IS),
    LLAMA_K(HF_AS_IS),
    LLAMA_V,
    QK_NORMS(WI_ONES),
    LLAMA_REST,
};

static const cf_family qwen3_family = {
    .arch = CF_ARCH_QWEN3,
    .name = "qwen3",
    .weights = qwen3_weights,
    .n_weights = COUNT(qwen3_weights),
    .check = llama_check,
    .default_ff = llama_default_ff,
    .block = {.norm = CF_NORM_RMS, .norm_place = CF_NORM_PRE, .position = CF_POS_ROPE, .rotary = CF_ROTARY_NEOX,
              .rotary_fraction = 1, .mlp = CF_MLP_SWIGLU, .fused_qkv = false, .qk_norm = true,
              .bias = {.norm = false, .qkv = false, .out = false, .up = false, .down = false}},
    .forward = cf_transformer_forward,
    .block_saved = llama_saved, /* the q/k norms' outputs are counted as q and k */
    .hf = LLAMA_HF_KEYS("qwen3", "Qwen3ForCausalLM"),
    .mf_model_classes = {"Qwen3ForCausalLM", NULL},
    .mf_config_class = "Qwen3Config",
    .gguf_arch = "qwen3",
};

/* Mistral: LLaMA's tensors and block; its sliding_window (model_config) is the attention
 * mask's window. llama.cpp converts it as architecture llama. */
static const cf_family mistral_family = {
    .arch = CF_ARCH_MISTRAL,
    .name = "mistral",
    .weights = llama_weights,
    .n_weights = COUNT(llama_weights),
    .check = llama_check,
    .default_ff = llama_default_ff,
    .block = {.norm = CF_NORM_RMS, .norm_place = CF_NORM_PRE, .position = CF_POS_ROPE,
              .rotary = CF_ROTARY_INTERLEAVED, .rotary_fraction = 1, .mlp = CF_MLP_SWIGLU, .fused_qkv = false,
              .bias = {.norm = false, .qkv = false, .out = false, .up = false, .down = false}},
    .forward = cf_transformer_forward,
    .block_saved = llama_saved,
    .hf = LLAMA_HF_KEYS("mistral", "MistralForCausalLM"),
    .mf_model_classes = {"MistralForCausalLM", NULL},
    .mf_config_class = "MistralConfig",
    .gguf_arch = "llama",
};

/* ---- Gemma 2: (1 + w) RMSNorm before and after attention and the MLP, GeGLU, embeddings
 * times sqrt(hidden_size), NEOX rotary, attention and final logits soft-capped, local
 * (sliding) and global layers alternating (model_config.sliding_window_pattern 2), tied
 * head. HF's post_attention_layernorm is the norm of attention's output here (LLaMA's
 * name for its pre-MLP norm); pre_feedforward_layernorm is the pre-MLP one. ---- */

#define GEMMA_NORM(role, hf, gguf)                                                                                     \
    {role, WP_LAYER, 1, {WD_HIDDEN}, WI_ZEROS, false, HF_AS_IS, "model.layers.%ld." hf ".weight", "blk.%ld." gguf ".weight", \
     CF_SPLIT_REPLICATED}

/* Gemma's rows after q, k, v (and Gemma 3's q/k norms): the output projection, the
 * post-attention norm, the MLP between its pre- and post-norm, the final norm and head. */
#define GEMMA_REST                                                                                                     \
    {WR_WO, WP_LAYER, 2, {WD_HIDDEN, WD_Q}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.self_attn.o_proj.weight",    \
     "blk.%ld.attn_output.weight", CF_SPLIT_ROW},                                                                      \
    GEMMA_NORM(WR_POST_ATTN_NORM, "post_attention_layernorm", "post_attention_norm"),                                  \
    GEMMA_NORM(WR_FFN_NORM, "pre_feedforward_layernorm", "ffn_norm"),                                                  \
    {WR_GATE, WP_LAYER, 2, {WD_FF, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.mlp.gate_proj.weight",    \
     "blk.%ld.ffn_gate.weight", CF_SPLIT_COLUMN},                                                                      \
    {WR_UP, WP_LAYER, 2, {WD_FF, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.mlp.up_proj.weight",        \
     "blk.%ld.ffn_up.weight", CF_SPLIT_COLUMN},                                                                        \
    {WR_DOWN, WP_LAYER, 2, {WD_HIDDEN, WD_FF}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.mlp.down_proj.weight",    \
     "blk.%ld.ffn_down.weight", CF_SPLIT_ROW},                                                                         \
    GEMMA_NORM(WR_POST_FFN_NORM, "post_feedforward_layernorm", "post_ffw_norm"),                                       \
    {WR_FINAL_NORM, WP_LAST, 1, {WD_HIDDEN}, WI_ZEROS, false, HF_AS_IS, "model.norm.weight", "output_norm.weight",    \
     CF_SPLIT_REPLICATED},                                                                                             \
    {WR_LM_HEAD, WP_UNTIED, 2, {WD_VOCAB, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "lm_head.weight", "output.weight",   \
     CF_SPLIT_VOCAB}

static const cf_family_weight gemma2_weights[] = {
    LLAMA_EMBED, GEMMA_NORM(WR_ATTN_NORM, "input_layernorm", "attn_norm"), LLAMA_Q(HF_AS_IS), LLAMA_K(HF_AS_IS),
    LLAMA_V,     GEMMA_REST,
};

static cf_saved_terms gemma2_saved(const cf_model_config *m, bool recomputed) {
    cf_saved_terms e = llama_saved(m, recomputed); /* and the two post-norms' inputs and statistics */
    e.compute += 2 * (double)m->hidden_size;
    e.f32 += 2;
    return e;
}

static const cf_family gemma2_family = {
    .arch = CF_ARCH_GEMMA2,
    .name = "gemma2",
    .weights = gemma2_weights,
    .n_weights = COUNT(gemma2_weights),
    .check = llama_check,
    .default_ff = llama_default_ff,
    .block = {.norm = CF_NORM_RMS, .norm_place = CF_NORM_PRE, .position = CF_POS_ROPE, .rotary = CF_ROTARY_NEOX,
              .rotary_fraction = 1, .mlp = CF_MLP_GEGLU, .fused_qkv = false, .norm_offset = true, .post_norms = true,
              .embed_scale = true, .bias = {.norm = false, .qkv = false, .out = false, .up = false, .down = false}},
    .forward = cf_transformer_forward,
    .block_saved = gemma2_saved,
    .hf = {.model_type = "gemma2", .architecture = "Gemma2ForCausalLM", .act_key = "hidden_activation",
           .act = "gelu_pytorch_tanh", .vocab = "vocab_size", .hidden = "hidden_size", .ff = "intermediate_size",
           .layers = "num_hidden_layers", .heads = "num_attention_heads", .kv_heads = "num_key_value_heads",
           .max_pos = "max_position_embeddings", .eps = "rms_norm_eps", .tie_default = true, .strip_prefix = NULL},
    .mf_model_classes = {"Gemma2ForCausalLM", NULL},
    .mf_config_class = "Gemma2Config",
    .gguf_arch = "gemma2",
};

/* ---- Phi-3: LLaMA's block (RMSNorm, SwiGLU, no biases) with q, k, v stored as one
 * qkv_proj and gate, up as one gate_up_proj (kept fused: one product each), NEOX rotary
 * (HF's rotate_half rows as they are, llama.cpp's phi3 likewise). ---- */

static const cf_family_weight phi3_weights[] = {
    LLAMA_EMBED,
    LLAMA_ATTN_NORM,
    {WR_QKV, WP_LAYER, 2, {WD_QKV, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.self_attn.qkv_proj.weight",
     "blk.%ld.attn_qkv.weight", CF_SPLIT_COLUMN_QKV},
    {WR_WO, WP_LAYER, 2, {WD_HIDDEN, WD_Q}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.self_attn.o_proj.weight",
     "blk.%ld.attn_output.weight", CF_SPLIT_ROW},
    {WR_FFN_NORM, WP_LAYER, 1, {WD_HIDDEN}, WI_ONES, false, HF_AS_IS, "model.layers.%ld.post_attention_layernorm.weight",
     "blk.%ld.ffn_norm.weight", CF_SPLIT_REPLICATED},
    /* llama.cpp's phi3 names the fused [2 ff, dim] tensor ffn_up */
    {WR_GATE_UP, WP_LAYER, 2, {WD_FF2, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.mlp.gate_up_proj.weight",
     "blk.%ld.ffn_up.weight", CF_SPLIT_COLUMN_QKV},
    {WR_DOWN, WP_LAYER, 2, {WD_HIDDEN, WD_FF}, WI_NORMAL, true, HF_AS_IS, "model.layers.%ld.mlp.down_proj.weight",
     "blk.%ld.ffn_down.weight", CF_SPLIT_ROW},
    {WR_FINAL_NORM, WP_LAST, 1, {WD_HIDDEN}, WI_ONES, false, HF_AS_IS, "model.norm.weight", "output_norm.weight",
     CF_SPLIT_REPLICATED},
    {WR_LM_HEAD, WP_UNTIED, 2, {WD_VOCAB, WD_HIDDEN}, WI_NORMAL, true, HF_AS_IS, "lm_head.weight", "output.weight",
     CF_SPLIT_VOCAB},
};

static const cf_family phi3_family = {
    .arch = CF_ARCH_PHI3,
    .name = "phi3",
    .weights = phi3_weights,
    .n_weights = COUNT(phi3_weights),
    .check = llama_check,
    .default_ff = llama_default_ff,
    .block = {.norm = CF_NORM_RMS, .norm_place = CF_NORM_PRE, .position = CF_POS_ROPE, .rotary = CF_ROTARY_NEOX,
              .rotary_fraction = 1, .mlp = CF_MLP_SWIGLU, .fused_qkv = true, .fused_gate_up = true,
              .bias = {.norm = false, .qkv = false, .out = false, .up = false, .down = false}},
    .forward = cf_transformer_forward,
    .block_saved = llama_saved,
    .hf = LLAMA_HF_KEYS("phi3", "Phi3ForCausalLM"),
    .mf_model_classes = {"Phi3ForCausalLM", NULL},
    .mf_config_class = "Phi3Config",
    .gguf_arch = "phi3",
};

/* ---- Gemma 3 (text): Gemma 2's block and tensors with each q and k head (1 + w)
 * RMS-normed before the rotary, no soft-caps (config.json's null), local layers rotating
 * with rope_local_base_freq (model_config.rope_local_theta), five local layers to one
 * global (sliding_window_pattern 6) ---- */

static const cf_family_weight gemma3_weights[] = {
    LLAMA_EMBED,
    GEMMA_NORM(WR_ATTN_NORM, "input_layernorm", "attn_norm"),
    LLAMA_Q(HF_AS_IS),
    LLAMA_K(HF_AS_IS),
    LLAMA_V,
    QK_NORMS(WI_ZEROS),
    GEMMA_REST,
};

static const cf_family gemma3_family = {
    .arch = CF_ARCH_GEMMA3,
    .name = "gemma3",
    .weights = gemma3_weights,
    .n_weights = COUNT(gemma3_weights),
    .check = llama_check,
    .default_ff = llama_default_ff,
    .block = {.norm = CF_NORM_RMS, .norm_place = CF_NORM_PRE, .position = CF_POS_ROPE, .rotary = CF_ROTARY_NEOX,
              .rotary_fraction = 1, .mlp = CF_MLP_GEGLU, .fused_qkv = false, .qk_norm = true, .norm_offset = true,
              .post_norms = true, .embed_scale = true,
              .bias = {.norm = false, .qkv = false, .out = false, .up = false, .down = false}},
    .forward = cf_transformer_forward,
    .block_saved = gemma2_saved, /* the q/k norms' outputs are counted as q and k */
    .hf = {.model_type = "gemma3_text", .architecture = "Gemma3ForCausalLM", .act_key = "hidden_activation",
           .act = "gelu_pytorch_tanh", .vocab = "vocab_size", .hidden = "hidden_size", .ff = "intermediate_size",
           .layers = "num_hidden_layers", .heads = "num_attention_heads", .kv_heads = "num_key_value_heads",
           .max_pos = "max_position_embeddings", .eps = "rms_norm_eps", .tie_default = true, .strip_prefix = NULL},
    .mf_model_classes = {"Gemma3ForCausalLM", NULL},
    .mf_config_class = "Gemma3TextConfig",
    .gguf_arch = "gemma3",
};

/* Indexed by cf_arch: a family added to the enum and not here fails to compile. */
static const cf_family *const families[] = {[CF_ARCH_LLAMA] = &llama_family,   [CF_ARCH_GPT2] = &gpt2_family,
                                            [CF_ARCH_QWEN2] = &qwen2_family,   [CF_ARCH_MISTRAL] = &mistral_family,
                                            [CF_ARCH_QWEN3] = &qwen3_family,   [CF_ARCH_GEMMA2] = &gemma2_family,
                                            [CF_ARCH_PHI3] = &phi3_family,     [CF_ARCH_GEMMA3] = &gemma3_family};
static_assert(CF_ARCH_COUNT == 8 && sizeof families / sizeof families[0] == CF_ARCH_COUNT,
              "every cf_arch needs its cf_family in families[] (docs/extending.md)");

const cf_family *cf_family_of(cf_arch arch) {
    return (unsigned)arch < (unsigned)CF_ARCH_COUNT ? families[arch] : NULL;
}

const cf_family *cf_family_named(const char *name) {
    for (int a = 0; a < CF_ARCH_COUNT; a++)
        if (strcmp(families[a]->name, name) == 0) return families[a];
    return NULL;
}

const cf_family_weight *cf_family_weight_of(const cf_family *f, cf_weight_role role) {
    for (int i = 0; i < f->n_weights; i++)
        if (f->weights[i].role == role) return &f->weights[i];
    return NULL;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
void cf_weight_name(const cf_family_weight *w, long layer, char *buf, size_t size) {
    snprintf(buf, size, w->name, layer); /* names without %ld ignore the layer */
}

void cf_weight_gguf_name(const cf_family_weight *w, long layer, char *buf, size_t size) {
    snprintf(buf, size, w->gguf, layer);
}
#pragma GCC diagnostic pop

static int64_t dim_size(const cf_model_config *m, cf_weight_dim d) {
    switch (d) {
    case WD_VOCAB: return m->vocab_size;
    case WD_HIDDEN: return m->hidden_size;
    case WD_KV: return m->num_heads > 0 ? size_product(m->num_kv_heads, cf_model_head_dim(m)) : -1;
    case WD_FF: return m->intermediate_size;
    case WD_POS: return m->max_position_embeddings;
    case WD_QKV: { /* -1 past INT64_MAX: cf_weight_numel refuses it */
        int64_t q = dim_size(m, WD_Q), kv = dim_size(m, WD_KV), kv2 = size_product(2, kv);
        return q < 0 || kv2 < 0 || q > INT64_MAX - kv2 ? -1 : q + kv2;
    }
    case WD_FF2: return size_product(2, m->intermediate_size);
    case WD_Q: return m->num_heads > 0 ? size_product(m->num_heads, cf_model_head_dim(m)) : -1;
    case WD_HEAD: return m->num_heads > 0 ? cf_model_head_dim(m) : -1;
    }
    return 0;
}

int cf_weight_shape(const cf_model_config *m, const cf_family_weight *w, int64_t shape[2]) {
    for (int i = 0; i < w->ndim; i++) shape[i] = dim_size(m, w->dims[i]);
    return w->ndim;
}

int cf_weight_describe(const cf_model_config *m, const cf_family_weight *w, long layer, char *buf, size_t size,
                       int64_t shape[2]) {
    cf_weight_name(w, layer, buf, size);
    return cf_weight_shape(m, w, shape);
}

bool cf_weight_numel(const cf_model_config *m, const cf_family_weight *w, size_t *n) {
    int64_t shape[2] = {0, 1};
    cf_weight_shape(m, w, shape);
    if (shape[0] < 0 || shape[1] < 0) return *n = 0, false;
    return cf_mul_size((uint64_t)shape[0], (uint64_t)shape[1], n);
}

static int foreach_place(const cf_family *f, cf_weight_place place, long layer, cf_weight_fn fn, void *ctx) {
    int rc = 0;
    for (int i = 0; i < f->n_weights && rc == 0; i++)
        if (f->weights[i].place == place) rc = fn(ctx, &f->weights[i], layer);
    return rc;
}

int cf_weights_foreach(const cf_model_config *m, cf_weight_fn fn, void *ctx) {
    const cf_family *f = cf_family_of(m->arch);
    int rc = foreach_place(f, WP_FIRST, 0, fn, ctx);
    for (long l = 0; l < m->num_layers && rc == 0; l++) rc = foreach_place(f, WP_LAYER, l, fn, ctx);
    if (rc == 0) rc = foreach_place(f, WP_LAST, 0, fn, ctx);
    if (rc == 0 && !m->tie_word_embeddings) rc = foreach_place(f, WP_UNTIED, 0, fn, ctx);
    return rc;
}

size_t cf_weights_count(const cf_model_config *m) {
    const cf_family *f = cf_family_of(m->arch);
    size_t fixed = 0, per_layer = 0, layers, total;
    for (int i = 0; i < f->n_weights; i++) {
        cf_weight_place p = f->weights[i].place;
        if (p == WP_LAYER) per_layer++;
        else if (p != WP_UNTIED || !m->tie_word_embeddings) fixed++;
    }
    if (m->num_layers < 0 || !cf_mul_size((uint64_t)m->num_layers, per_layer, &layers) ||
        !cf_add_size(layers, fixed, &total))
        return 0;
    return total;
}

int cf_model_config_check(const cf_model_config *m, const char *source, cf_error *err) {
    const cf_family *f = cf_family_of(m->arch);
    if (!f) return cf_fail(err, "%s: arch %d is not a model family", source, (int)m->arch);
    if (m->vocab_size < 1 || m->hidden_size < 1 || m->num_layers < 1 || m->num_heads < 1 || m->num_kv_heads < 1 ||
        m->intermediate_size < 1)
        return cf_fail(err, "%s: model sizes must be positive (vocab %lld, hidden %lld, layers %lld, heads %lld/%lld, "
                            "intermediate %lld)",
                       source, (long long)m->vocab_size, (long long)m->hidden_size, (long long)m->num_layers,
                       (long long)m->num_heads, (long long)m->num_kv_heads, (long long)m->intermediate_size);
    if ((m->head_dim == 0 && m->hidden_size % m->num_heads) || m->num_heads % m->num_kv_heads || m->head_dim < 0)
        return cf_fail(err, "%s: hidden_size %lld, num_heads %lld, num_kv_heads %lld, head_dim %lld: heads must divide "
                            "evenly",
                       source, (long long)m->hidden_size, (long long)m->num_heads, (long long)m->num_kv_heads,
                       (long long)m->head_dim);
    if (m->max_position_embeddings < 1) return cf_fail(err, "%s: max_position_embeddings must be positive", source);
    if (!(m->rms_norm_eps > 0 && m->rms_norm_eps <= 1))
        return cf_fail(err, "%s: rms_norm_eps %g must be in (0, 1]", source, m->rms_norm_eps);
    char msg[256];
    const char *key = f->check(m, msg, sizeof msg);
    if (key) return cf_fail(err, "%s: %s %s: %s", source, f->name, key, msg);
    for (int i = 0; i < f->n_weights; i++) {
        size_t n, bytes;
        if (!cf_weight_numel(m, &f->weights[i], &n) || !cf_mul_size(n, sizeof(float), &bytes)) {
            char name[128];
            cf_weight_name(&f->weights[i], 0, name, sizeof name);
            return cf_fail(err, "%s: tensor %s: the shape implied by vocab_size %lld, hidden_size %lld, "
                                "intermediate_size %lld overflows the address space",
                           source, name, (long long)m->vocab_size, (long long)m->hidden_size,
                           (long long)m->intermediate_size);
        }
    }
    return 0;
}

/* ---- the block program ---- */

static cf_weight_role bias_if(bool has, cf_weight_role role) { return has ? role : CF_NO_WEIGHT; }

static cf_block_step norm_step(const cf_block_recipe *r, cf_slot in, cf_slot out, cf_weight_role w, cf_weight_role b) {
    return (cf_block_step){.kind = CF_STEP_NORM, .in = in, .out = {out}, .n_out = 1, .weight = {w},
                           .bias = {bias_if(r->bias.norm, b)}, .fused = CF_NO_WEIGHT, .fused_bias = CF_NO_WEIGHT,
                           .norm = r->norm, .norm_offset = r->norm_offset};
}

/* A group of n projections of `in` (weights w, biases b: CF_NO_WEIGHT for none). */
static cf_block_step linear_step(cf_slot in, int n, const cf_slot *out, const cf_weight_role *w, const cf_weight_role *b) {
    cf_block_step s = {.kind = CF_STEP_LINEAR, .in = in, .n_out = n, .fused = CF_NO_WEIGHT,
                       .fused_bias = CF_NO_WEIGHT};
    for (int i = 0; i < 3; i++) {
        s.out[i] = i < n ? out[i] : CF_SLOT_COUNT;
        s.weight[i] = i < n ? w[i] : CF_NO_WEIGHT;
        s.bias[i] = i < n ? b[i] : CF_NO_WEIGHT;
    }
    return s;
}

static cf_block_step simple_step(cf_step_kind kind, cf_slot in) {
    return (cf_block_step){.kind = kind, .in = in, .n_out = 0, .weight = {CF_NO_WEIGHT, CF_NO_WEIGHT, CF_NO_WEIGHT},
                           .bias = {CF_NO_WEIGHT, CF_NO_WEIGHT, CF_NO_WEIGHT}, .fused = CF_NO_WEIGHT,
                           .fused_bias = CF_NO_WEIGHT};
}

/* Every tensor a step names is in the family's table (a fused tensor's parts are not:
 * the tensor is). */
static int check_roles(const cf_family *f, const cf_block_step *s, cf_error *err) {
    bool fused = s->fused != CF_NO_WEIGHT;
    cf_weight_role roles[8] = {s->bias[0], s->bias[1], s->bias[2], s->fused, s->fused_bias,
                               fused ? CF_NO_WEIGHT : s->weight[0], fused ? CF_NO_WEIGHT : s->weight[1],
                               fused ? CF_NO_WEIGHT : s->weight[2]};
    for (int i = 0; i < 8; i++)
        if (roles[i] != CF_NO_WEIGHT && !cf_family_weight_of(f, roles[i]))
            return cf_fail(err, "%s: the block recipe needs tensor role %d, which the family's table lacks", f->name,
                           (int)roles[i]);
    return 0;
}

int cf_block_program_compile(const cf_model_config *m, cf_block_program *p, cf_error *err) {
    const cf_family *f = cf_family_of(m->arch);
    if (!f) return cf_fail(err, "arch %d is not a model family", (int)m->arch);
    if (cf_block_program_of_recipe(f, &f->block, p, err) != 0) return -1;
    if (m->sliding_window_pattern < 0)
        return cf_fail(err, "%s: sliding_window_pattern %lld must be >= 0", f->name, (long long)m->sliding_window_pattern);
    if (!(m->final_logit_softcap >= 0 && isfinite(m->final_logit_softcap)))
        return cf_fail(err, "%s: final_logit_softcap %g must be finite and >= 0", f->name, m->final_logit_softcap);
    if (!(m->query_pre_attn_scalar >= 0 && isfinite(m->query_pre_attn_scalar)))
        return cf_fail(err, "%s: query_pre_attn_scalar %g must be finite and >= 0", f->name, m->query_pre_attn_scalar);
    p->window_pattern = (long)m->sliding_window_pattern;
    if (!(m->rope_local_theta >= 0 && isfinite(m->rope_local_theta)))
        return cf_fail(err, "%s: rope_local_theta %g must be finite and >= 0", f->name, m->rope_local_theta);
    p->local_rope = p->rotary && m->rope_local_theta > 0 && m->rope_local_theta != m->rope_theta;
    p->logit_softcap = (float)m->final_logit_softcap;
    if (f->block.embed_scale) p->embed_scale = (float)sqrt((double)m->hidden_size);
    for (int i = 0; i < p->n_steps; i++) /* the config's window (local layers: cf_block_layer_mask) and cap */
        if (p->steps[i].kind == CF_STEP_ATTENTION) {
            p->steps[i].mask.window = (long)m->sliding_window;
            p->steps[i].mask.softcap = (float)m->attn_logit_softcap;
            if (cf_attn_mask_check(&p->steps[i].mask, f->name, err)) return -1;
            /* scores q.k / sqrt(query_pre_attn_scalar): Q scaled by sqrt(hd / qpas) first */
            double hd = (double)cf_model_head_dim(m), qpas = m->query_pre_attn_scalar;
            if (qpas == 0 || qpas == hd) continue;
            if (p->n_steps == CF_BLOCK_MAX_STEPS) return cf_fail(err, "%s: the block program is full", f->name);
            memmove(&p->steps[i + 1], &p->steps[i], sizeof p->steps[0] * (size_t)(p->n_steps - i));
            p->steps[i] = simple_step(CF_STEP_SCALE_Q, CF_SLOT_Q);
            p->steps[i].scale = (float)sqrt(hd / qpas);
            p->n_steps++, i++;
        }
    return 0;
}

bool cf_block_layer_local(const cf_block_program *p, long layer) {
    long window = 0;
    for (int i = 0; i < p->n_steps; i++)
        if (p->steps[i].kind == CF_STEP_ATTENTION) window = p->steps[i].mask.window;
    return window > 0 && !(p->window_pattern > 1 && layer % p->window_pattern == p->window_pattern - 1);
}

cf_attn_mask cf_block_layer_mask(const cf_block_program *p, const cf_block_step *step, long layer) {
    cf_attn_mask mask = step->mask;
    if (!cf_block_layer_local(p, layer)) mask.window = 0;
    return mask;
}

int cf_block_program_of_recipe(const cf_family *f, const cf_block_recipe *r, cf_block_program *p, cf_error *err) {
    *p = (cf_block_program){.learned_positions = r->position == CF_POS_LEARNED, .rotary = r->position == CF_POS_ROPE,
                            .rotary_kind = r->rotary, .embed_scale = 1};
    if (r->norm_place != CF_NORM_PRE) return cf_fail(err, "%s: only pre-norm blocks are implemented", f->name);
    if (p->rotary && r->rotary_fraction != 0 && r->rotary_fraction != 1)
        return cf_fail(err, "%s: partial rotary (fraction %g of head_dim) is not implemented", f->name,
                       r->rotary_fraction);
    if (r->qk_norm && r->norm != CF_NORM_RMS)
        return cf_fail(err, "%s: q/k head norms as LayerNorm are not implemented (RMSNorm only)", f->name);
    if (r->norm == CF_NORM_LAYER && !r->bias.norm)
        return cf_fail(err, "%s: LayerNorm without a bias is not implemented", f->name);
    if (r->norm_offset && r->norm != CF_NORM_RMS)
        return cf_fail(err, "%s: (1 + w) norm weights are implemented for RMSNorm only", f->name);
    if (r->fused_gate_up && r->mlp == CF_MLP_GELU)
        return cf_fail(err, "%s: a fused gate/up projection needs a gated MLP", f->name);
    if (r->bias.up && r->mlp != CF_MLP_GELU)
        return cf_fail(err, "%s: an MLP bias with a gated MLP has no gate bias tensor role", f->name);
    cf_block_step *s = p->steps;
    int n = 0;
    s[n++] = norm_step(r, CF_SLOT_X, CF_SLOT_H, WR_ATTN_NORM, WR_ATTN_NORM_BIAS);
    const cf_slot qkv[3] = {CF_SLOT_Q, CF_SLOT_K, CF_SLOT_V};
    const cf_weight_role wqkv[3] = {WR_WQ, WR_WK, WR_WV}, none[3] = {CF_NO_WEIGHT, CF_NO_WEIGHT, CF_NO_WEIGHT};
    const cf_weight_role bqkv[3] = {WR_WQ_BIAS, WR_WK_BIAS, WR_WV_BIAS};
    s[n] = linear_step(CF_SLOT_H, 3, qkv, wqkv, r->bias.qkv && !r->fused_qkv ? bqkv : none);
    if (r->fused_qkv) s[n].fused = WR_QKV, s[n].fused_bias = bias_if(r->bias.qkv, WR_QKV_BIAS);
    n++;
    if (r->qk_norm) {
        s[n] = simple_step(CF_STEP_HEAD_NORM, CF_SLOT_Q);
        s[n].weight[0] = WR_Q_NORM, s[n].weight[1] = WR_K_NORM, s[n].norm_offset = r->norm_offset;
        s[n++].norm = CF_NORM_RMS;
    }
    if (p->rotary) {
        s[n] = simple_step(CF_STEP_ROTARY, CF_SLOT_Q);
        s[n].rotary = r->rotary, s[n].rotary_fraction = 1;
        n++;
    }
    s[n] = simple_step(CF_STEP_ATTENTION, CF_SLOT_Q);
    s[n].mask = cf_mask_causal();
    if (cf_attn_mask_check(&s[n].mask, f->name, err)) return -1;
    s[n++].out[0] = CF_SLOT_ATT;
    const cf_slot y[1] = {CF_SLOT_Y};
    s[n++] = linear_step(CF_SLOT_ATT, 1, y, (cf_weight_role[]){WR_WO}, (cf_weight_role[]){bias_if(r->bias.out, WR_WO_BIAS)});
    if (r->post_norms) s[n++] = norm_step(r, CF_SLOT_Y, CF_SLOT_Y, WR_POST_ATTN_NORM, CF_NO_WEIGHT);
    s[n++] = simple_step(CF_STEP_RESIDUAL, CF_SLOT_Y);
    s[n++] = norm_step(r, CF_SLOT_X, CF_SLOT_H, WR_FFN_NORM, WR_FFN_NORM_BIAS);
    switch (r->mlp) {
    case CF_MLP_SWIGLU:
    case CF_MLP_GEGLU:
        s[n] = linear_step(CF_SLOT_H, 2, (cf_slot[]){CF_SLOT_FF1, CF_SLOT_FF2}, (cf_weight_role[]){WR_GATE, WR_UP},
                           none);
        if (r->fused_gate_up) s[n].fused = WR_GATE_UP;
        n++;
        break;
    case CF_MLP_GELU:
        s[n++] = linear_step(CF_SLOT_H, 1, (cf_slot[]){CF_SLOT_FF1}, (cf_weight_role[]){WR_UP},
                             (cf_weight_role[]){bias_if(r->bias.up, WR_UP_BIAS)});
        break;
    }
    s[n] = simple_step(CF_STEP_ACTIVATE, CF_SLOT_FF1);
    s[n].act = r->mlp, s[n++].out[0] = CF_SLOT_FF1;
    s[n++] = linear_step(CF_SLOT_FF1, 1, y, (cf_weight_role[]){WR_DOWN},
                         (cf_weight_role[]){bias_if(r->bias.down, WR_DOWN_BIAS)});
    if (r->post_norms) s[n++] = norm_step(r, CF_SLOT_Y, CF_SLOT_Y, WR_POST_FFN_NORM, CF_NO_WEIGHT);
    s[n++] = simple_step(CF_STEP_RESIDUAL, CF_SLOT_Y);
    p->n_steps = n;
    p->final_norm = norm_step(r, CF_SLOT_X, CF_SLOT_H, WR_FINAL_NORM, WR_FINAL_NORM_BIAS);
    for (int i = 0; i < n; i++)
        if (check_roles(f, &s[i], err)) return -1;
    return check_roles(f, &p->final_norm, err);
}
