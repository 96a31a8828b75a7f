/* The architecture of a model: the `model.model_config` section of a cformers YAML
 * config (MindFormers names), also filled by checkpoint importers. */
#ifndef CFORMERS_MODEL_CONFIG_H
#define CFORMERS_MODEL_CONFIG_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stdint.h>

#include "cformers/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cf_arch {
    CF_ARCH_LLAMA = 0, /* RMSNorm, RoPE, GQA, SwiGLU, no biases */
    CF_ARCH_GPT2 = 1,  /* learned positions, LayerNorm, GELU(tanh), biases, tied output */
    CF_ARCH_QWEN2 = 2, /* LLaMA's block with q, k, v biases and NEOX rotary (Qwen2, Qwen2.5) */
    CF_ARCH_MISTRAL = 3, /* LLaMA's block and tensors, sliding-window attention (sliding_window) */
    CF_ARCH_QWEN3 = 4, /* Qwen2's block without biases, RMSNorm of each q and k head, head_dim of its own */
    CF_ARCH_GEMMA2 = 5, /* (1 + w) RMSNorm before and after each sublayer, GeGLU, scaled embedding, soft-caps,
                           local (sliding) and global layers alternating */
    CF_ARCH_PHI3 = 6,   /* LLaMA's block with fused q/k/v and gate/up projections, NEOX rotary */
    CF_ARCH_GEMMA3 = 7, /* Gemma 2's block with (1 + w) q/k head norms, no soft-caps, a rope base of its own
                           on local layers (Gemma 3 text) */
    CF_ARCH_COUNT      /* the number of families (src/models/family.c describes each) */
} cf_arch;

typedef struct cf_model_config {
    cf_arch arch;
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t num_layers;
    int64_t num_heads;
    int64_t num_kv_heads;              /* == num_heads without grouped-query attention */
    int64_t head_dim;                  /* width of a q/k/v head; 0: hidden_size / num_heads */
    int64_t intermediate_size;         /* MLP inner width */
    int64_t max_position_embeddings;   /* longest sequence (and GPT-2's position table) */
    double rope_theta;
    /* LLaMA-3 style RoPE frequency scaling; factor 0 or 1 disables it. */
    double rope_scaling_factor;
    double rope_low_freq_factor;
    double rope_high_freq_factor;
    int64_t rope_original_max_position;
    double rms_norm_eps;               /* also LayerNorm's epsilon for GPT-2 */
    int64_t sliding_window;            /* attention sees the last W keys, the query's included (Mistral); 0: all */
    /* with sliding_window: every Nth layer (layer % N == N - 1) attends to all keys, the
     * others in the window (Gemma 2: 2, Gemma 3: 6); 0: the window on every layer */
    int64_t sliding_window_pattern;
    double attn_logit_softcap;         /* attention scores c * tanh(s / c) (Gemma 2); 0: none */
    double final_logit_softcap;        /* output logits c * tanh(z / c) (Gemma 2); 0: none */
    double query_pre_attn_scalar;      /* attention scores scaled by 1 / sqrt(this) (Gemma); 0: head_dim */
    double rope_local_theta;           /* RoPE base of the local (windowed) layers (Gemma 3); 0: rope_theta */
    bool tie_word_embeddings;
    bool use_flash_attention;
    cf_dtype compute_dtype;            /* matmul inputs: f32, bf16 or f16 */
    cf_dtype param_init_type;          /* master weights, normally f32 */
    cf_dtype softmax_compute_type;     /* softmax / loss: f32 (the only one supported) */
    cf_dtype layernorm_compute_type;   /* norms: f32 (the only one supported) */
    cf_dtype rotary_dtype;             /* RoPE tables and rotation: f32 (the only one supported) */
    double initializer_range;          /* std of the normal init */
    int64_t bos_token_id, eos_token_id, pad_token_id; /* -1 when absent */
    /* LLaMA's MLP width rule when intermediate_size is 0: 2/3 of 4 hidden, times
     * ffn_dim_multiplier when > 0, rounded up to a multiple of multiple_of (config only:
     * not stored in checkpoints, which hold the resolved intermediate_size). */
    int64_t multiple_of;
    double ffn_dim_multiplier;
} cf_model_config;

/* head_dim when set (Qwen3, Gemma: q and k wider or narrower than hidden_size / num_heads),
 * else hidden_size / num_heads */
static inline int64_t cf_model_head_dim(const cf_model_config *m) {
    return m->head_dim > 0 ? m->head_dim : m->hidden_size / m->num_heads;
}

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
