/* Model families, each described once: its tensors (cformers/Hugging Face names, shapes,
 * initialisation, weight decay, layout in HF files, GGUF names), its config rules and
 * defaults, the training graph builder, the memory estimate's per-block terms and the
 * Hugging Face config.json keys. Every tool (graph, parameter count, memory estimate,
 * checkpoint import/export, inference) looks the family up here, so adding a family is
 * adding one cf_family (docs/extending.md) and the compiler or test_family names each
 * place left out. */
#ifndef CFORMERS_MODELS_FAMILY_H
#define CFORMERS_MODELS_FAMILY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"
#include "cformers/model_graph.h"
#include "kernels/attn_mask.h"

/* What a tensor is for; tools that treat tensors differently (inference, the HF and GGUF
 * layouts) switch on it. A family uses the roles its blocks have. */
typedef enum cf_weight_role {
    WR_EMBED,           /* token embedding                  [vocab, dim] */
    WR_POS_EMBED,       /* learned positions                [max_pos, dim] */
    WR_ATTN_NORM,       /* pre-attention norm weight        [dim] */
    WR_ATTN_NORM_BIAS,  /* its bias (LayerNorm)             [dim] */
    WR_WQ,              /* query projection                 [dim, dim] */
    WR_WK,              /* key projection                   [kv_dim, dim] */
    WR_WV,              /* value projection                 [kv_dim, dim] */
    WR_QKV,             /* fused q, k, v rows               [q_dim + 2 kv_dim, dim] */
    WR_QKV_BIAS,        /*                                  [3 dim] */
    WR_WO,              /* attention output                 [dim, dim] */
    WR_WO_BIAS,         /*                                  [dim] */
    WR_FFN_NORM,        /* pre-MLP norm weight              [dim] */
    WR_FFN_NORM_BIAS,   /*                                  [dim] */
    WR_GATE,            /* SwiGLU gate                      [ff, dim] */
    WR_UP,              /* MLP input (SwiGLU up, GELU fc)   [ff, dim] */
    WR_UP_BIAS,         /*                                  [ff] */
    WR_DOWN,            /* MLP output                       [dim, ff] */
    WR_DOWN_BIAS,       /*                                  [dim] */
    WR_FINAL_NORM,      /* final norm weight                [dim] */
    WR_FINAL_NORM_BIAS, /*                                  [dim] */
    WR_LM_HEAD,         /* output head when untied          [vocab, dim] */
    WR_WQ_BIAS,         /* separate q, k, v biases (Qwen2)  [q_dim] */
    WR_WK_BIAS,         /*                                  [kv_dim] */
    WR_WV_BIAS,         /*                                  [kv_dim] */
    WR_Q_NORM,          /* RMSNorm of each q head (Qwen3)   [head_dim] */
    WR_K_NORM,          /* RMSNorm of each k head           [head_dim] */
    WR_POST_ATTN_NORM,  /* norm of attention's output (Gemma) [dim] */
    WR_POST_FFN_NORM,   /* norm of the MLP's output (Gemma) [dim] */
    WR_GATE_UP,         /* fused gate and up rows (Phi-3)   [2 ff, dim] */
    WR_COUNT
} cf_weight_role;

/* A tensor dimension in terms of the config. */
typedef enum cf_weight_dim {
    WD_VOCAB = 1,
    WD_HIDDEN, /* hidden_size */
    WD_KV,     /* num_kv_heads * head_dim */
    WD_FF,     /* intermediate_size */
    WD_POS,    /* max_position_embeddings */
    WD_QKV,    /* num_heads * head_dim + 2 num_kv_heads * head_dim (3 hidden_size without GQA) */
    WD_Q,      /* num_heads * head_dim (hidden_size unless head_dim is its own) */
    WD_HEAD,   /* head_dim */
    WD_FF2,    /* 2 * intermediate_size (fused gate and up) */
} cf_weight_dim;

/* Where a tensor sits in file order: before the layers, once per layer, after them, or
 * after them only when tie_word_embeddings is false. */
typedef enum cf_weight_place { WP_FIRST, WP_LAYER, WP_LAST, WP_UNTIED } cf_weight_place;

typedef enum cf_weight_init { WI_NORMAL, WI_NORMAL_RESIDUAL, WI_ONES, WI_ZEROS } cf_weight_init;

/* How Hugging Face stores the tensor relative to cformers' [out, in] rows: as is, q/k rows
 * in rotate-half order (LLaMA), or transposed ([in, out], GPT-2's Conv1D). */
typedef enum cf_hf_layout { HF_AS_IS, HF_ROPE_Q, HF_ROPE_K, HF_CONV1D } cf_hf_layout;

/* How tensor parallelism cuts the tensor across the ranks of a tensor group (Megatron):
 * by output rows (column-parallel: q, k, v, gate, up and their biases), by input columns
 * (row-parallel: the attention output and MLP down; their biases are added once, after
 * the sum, so they stay whole), by vocabulary rows (embedding, head), or not at all
 * (norms, learned positions). A fused tensor is column-parallel within each of its parts'
 * row blocks: GPT-2's c_attn and Phi-3's qkv_proj (q, k, v: q wider under GQA), Phi-3's
 * gate_up_proj (gate, up). 0 is no value: test_family checks every tensor has one. */
typedef enum cf_tp_split {
    CF_SPLIT_REPLICATED = 1,
    CF_SPLIT_COLUMN,     /* rows [out] of a [out, in] matrix, or a bias [out] */
    CF_SPLIT_COLUMN_QKV, /* each of a fused tensor's stacked parts (q, k, v; gate, up) cut as CF_SPLIT_COLUMN */
    CF_SPLIT_ROW,        /* columns [in] of a [out, in] matrix */
    CF_SPLIT_VOCAB,      /* rows of a [vocab, dim] table or head */
} cf_tp_split;

typedef struct cf_family_weight {
    cf_weight_role role;
    cf_weight_place place;
    int ndim;
    cf_weight_dim dims[2];
    cf_weight_init init;
    bool decay;       /* AdamW weight decay applies */
    cf_hf_layout hf;
    const char *name; /* cformers and Hugging Face name; per-layer names take the layer as %ld */
    const char *gguf; /* llama.cpp's name, same convention */
    cf_tp_split split;
} cf_family_weight;

/* The facts of a family's decoder block. They compile once (cf_block_program_compile)
 * into the block program that the training graph builder (transformer.c) emits graph ops
 * from and the inference interpreter (src/infer/block.c) runs over the KV cache, so a
 * family made of existing pieces needs no graph or inference code of its own. */
typedef enum cf_norm_kind { CF_NORM_RMS, CF_NORM_LAYER } cf_norm_kind;          /* RMSNorm, LayerNorm */
typedef enum cf_norm_place { CF_NORM_PRE } cf_norm_place;                        /* before each sublayer */
typedef enum cf_position_kind { CF_POS_ROPE, CF_POS_LEARNED } cf_position_kind; /* rotary, added table */
/* Rotary pairs: (x[2i], x[2i+1]) as Meta's LLaMA (llama.cpp's rope type NORM; HF's
 * rotate-half q/k rows are permuted into it on import, HF_ROPE_Q/K), or (x[i], x[i + d/2])
 * as GPT-NeoX and Hugging Face's rotate_half compute it (llama.cpp's NEOX: Qwen2, Qwen3),
 * with HF's rows as they are. */
typedef enum cf_rotary_kind { CF_ROTARY_INTERLEAVED, CF_ROTARY_NEOX } cf_rotary_kind;
/* SwiGLU silu(gate) * up, then down; GELU(tanh) of fc, then proj; GeGLU gelu_tanh(gate) * up, then down (Gemma). */
typedef enum cf_mlp_kind { CF_MLP_SWIGLU, CF_MLP_GELU, CF_MLP_GEGLU } cf_mlp_kind;

typedef struct cf_block_recipe {
    cf_norm_kind norm;
    cf_norm_place norm_place;
    cf_position_kind position;
    cf_rotary_kind rotary;  /* with CF_POS_ROPE */
    double rotary_fraction; /* of head_dim rotated, with CF_POS_ROPE: 0 or 1 = all (partial refused) */
    cf_mlp_kind mlp;
    bool fused_qkv; /* one [3 dim, dim] projection (WR_QKV), else WR_WQ, WR_WK, WR_WV */
    bool qk_norm;   /* each q and k head normed (the block's norm kind) before the rotary (Qwen3) */
    bool fused_gate_up; /* one [2 ff, dim] gate-then-up projection (WR_GATE_UP, Phi-3), else WR_GATE, WR_UP */
    /* RMSNorm weights stored as Hugging Face's Gemma keeps them and applied as (1 + w) */
    bool norm_offset;
    bool post_norms;  /* also a norm of each sublayer's output before the residual add (Gemma: 4 a layer) */
    bool embed_scale; /* embeddings times sqrt(hidden_size) (Gemma) */
    /* which projections and norms carry a bias (the table holds the tensors; test_family
     * checks they agree); qkv: WR_QKV_BIAS when fused, else WR_WQ_BIAS, WR_WK_BIAS, WR_WV_BIAS */
    struct {
        bool norm, qkv, out, up, down;
    } bias;
} cf_block_recipe;

/* ---- the block program: the recipe compiled into steps over named values ---- */

/* Values a block step reads and writes: the residual stream, the normed input of a
 * sublayer, q, k, v ([n, heads * head_dim]), attention's output, a sublayer's output
 * before the residual add, and the MLP's hidden values. The interpreter maps each to a
 * buffer (H and Y share one: H is dead once Y is written), the graph emitter to a tensor. */
typedef enum cf_slot {
    CF_SLOT_X,
    CF_SLOT_H,
    CF_SLOT_Q,
    CF_SLOT_K,
    CF_SLOT_V,
    CF_SLOT_ATT,
    CF_SLOT_Y,
    CF_SLOT_FF1,
    CF_SLOT_FF2,
    CF_SLOT_COUNT
} cf_slot;

typedef enum cf_step_kind {
    CF_STEP_NORM,      /* out = norm(in; weight[0], bias[0]) */
    CF_STEP_LINEAR,    /* out[i] = in weight[i]^T (+ bias[i]), i < n_out, the group sharing its input */
    CF_STEP_HEAD_NORM, /* each head of Q normed with weight[0], of K with weight[1] (RMSNorm over head_dim) */
    CF_STEP_ROTARY,    /* Q and K rotated at their positions */
    CF_STEP_ATTENTION, /* ATT = attention(Q, K, V) under mask (the interpreter stores K, V in its cache first) */
    CF_STEP_ACTIVATE,  /* SwiGLU: FF1 = silu(FF1) * FF2; GELU: FF1 = gelu_tanh(FF1); GeGLU: gelu_tanh(FF1) * FF2 */
    CF_STEP_RESIDUAL,  /* X += in */
    CF_STEP_SCALE_Q,   /* Q *= scale (query_pre_attn_scalar: scores q.k / sqrt(qpas), the kernels divide by sqrt(hd)) */
} cf_step_kind;

/* No weight or bias: WR_COUNT. */
#define CF_NO_WEIGHT WR_COUNT

typedef struct cf_block_step {
    cf_step_kind kind;
    cf_slot in, out[3];
    int n_out;
    cf_weight_role weight[3], bias[3];
    /* LINEAR: the n_out projections stored as one tensor of stacked rows (GPT-2's c_attn,
     * WR_QKV) and its bias, or CF_NO_WEIGHT; weight[i] then name the logical parts */
    cf_weight_role fused, fused_bias;
    cf_norm_kind norm;       /* NORM */
    bool norm_offset;        /* NORM, HEAD_NORM: RMSNorm weights applied as (1 + w) (Gemma) */
    float scale;             /* SCALE_Q */
    cf_rotary_kind rotary;   /* ROTARY */
    double rotary_fraction;  /* ROTARY: 1 */
    cf_mlp_kind act;         /* ACTIVATE */
    cf_attn_mask mask;       /* ATTENTION */
} cf_block_step;

enum { CF_BLOCK_MAX_STEPS = 16 };

typedef struct cf_block_program {
    cf_block_step steps[CF_BLOCK_MAX_STEPS]; /* one layer, applied to each */
    int n_steps;
    cf_block_step final_norm; /* after the last layer: X normed into H */
    bool learned_positions;   /* WR_POS_EMBED added to the embeddings */
    bool rotary;              /* a ROTARY step: the RoPE table is needed */
    cf_rotary_kind rotary_kind; /* its pairs, with rotary */
    float embed_scale;        /* embeddings times this (Gemma: sqrt(hidden_size) rounded to f32); 1: none */
    float logit_softcap;      /* logits c * tanh(z / c) after the head (Gemma 2); 0: none */
    long window_pattern;      /* the config's sliding_window_pattern */
    bool local_rope;          /* local layers rotate with a table of their own base (Gemma 3: rope_local_theta) */
} cf_block_program;

/* Whether `layer` is local: it attends in the window (the ATTENTION step's mask has one,
 * and with pattern N the layer is not one of every Nth, which attend globally). Local layers rotate with the
 * local table when p->local_rope. */
bool cf_block_layer_local(const cf_block_program *p, long layer);
/* The attention mask of `step` (an ATTENTION step of p) on layer `layer`: its window only
 * on local layers. */
cf_attn_mask cf_block_layer_mask(const cf_block_program *p, const cf_block_step *step, long layer);

/* The program of m's family (m->arch must name one). Fails, naming the family and the
 * fact, for a recipe the kernels do not implement (partial rotary) or a bias the
 * tensor table has no tensor for. The attention step's mask is causal, with
 * m->sliding_window as its window (Mistral; 0: none; on local layers only with a
 * sliding_window_pattern, Gemma) and m->attn_logit_softcap as its soft-cap (Gemma 2). */
int cf_block_program_compile(const cf_model_config *m, cf_block_program *p, cf_error *err);

/* Elements one transformer block keeps for backward per token (memory estimate). */
typedef struct cf_saved_terms {
    double compute; /* matmul inputs and outputs, in compute_dtype */
    double f32;     /* norm statistics, in softmax_compute_type */
} cf_saved_terms;

/* config.json keys of the Hugging Face model class (NULL: the key does not exist). */
typedef struct cf_hf_keys {
    const char *model_type, *architecture;
    const char *act_key, *act; /* the activation's key and value */
    const char *vocab, *hidden, *ff, *layers, *heads, *kv_heads, *max_pos, *eps;
    bool tie_default;          /* tie_word_embeddings when config.json leaves it out */
    const char *strip_prefix;  /* a prefix files saved from the base model lack ("transformer."), or NULL */
} cf_hf_keys;

typedef struct cf_family {
    cf_arch arch;
    const char *name; /* model_config.arch value, checkpoint "arch" */
    const cf_family_weight *weights;
    int n_weights;
    /* Family rules beyond the shared ones (sizes positive, heads divide): NULL when m is
     * fine, else the offending model_config key, with the reason in msg. */
    const char *(*check)(const cf_model_config *m, char *msg, size_t cap);
    /* intermediate_size when the config leaves it 0 */
    int64_t (*default_ff)(const cf_model_config *m);
    cf_block_recipe block;
    /* Builds the forward on out->graph (tokens, targets exist) and returns the logits
     * [B, T, vocab], NULL on error recorded in the graph: cf_transformer_forward, which
     * follows `block`, for every family so far. */
    cf_tensor *(*forward)(const cf_model_config *m, int64_t batch, int64_t seq_len, cf_model_graph *out);
    /* Saved elements per token of one block; `recomputed` drops what select_recompute rebuilds. */
    cf_saved_terms (*block_saved)(const cf_model_config *m, bool recomputed);
    cf_hf_keys hf;
    /* MindFormers class names: model.arch.type spellings (NULL-terminated) and model_config.type */
    const char *mf_model_classes[3];
    const char *mf_config_class;
    const char *gguf_arch; /* general.architecture */
} cf_family;

/* cf_block_program_compile for recipe r over family f's tensor table (a recipe being
 * designed; tests). */
int cf_block_program_of_recipe(const cf_family *f, const cf_block_recipe *r, cf_block_program *p, cf_error *err);

/* The family of arch, or NULL when arch is not one (a corrupt value). */
const cf_family *cf_family_of(cf_arch arch);
/* By model_config.arch name, or NULL. */
const cf_family *cf_family_named(const char *name);
/* The family's tensor with this role, or NULL when it has none. */
const cf_family_weight *cf_family_weight_of(const cf_family *f, cf_weight_role role);

/* The tensor's name for a layer ("model.layers.3.mlp.up_proj.weight"), GGUF name likewise. */
void cf_weight_name(const cf_family_weight *w, long layer, char *buf, size_t size);
void cf_weight_gguf_name(const cf_family_weight *w, long layer, char *buf, size_t size);
/* Its shape under m; returns ndim (1 or 2). */
int cf_weight_shape(const cf_model_config *m, const cf_family_weight *w, int64_t shape[2]);
/* Both: the name into buf, the shape; returns ndim. */
int cf_weight_describe(const cf_model_config *m, const cf_family_weight *w, long layer, char *buf, size_t size,
                       int64_t shape[2]);
/* Element count (checked); false when it does not fit in size_t. */
bool cf_weight_numel(const cf_model_config *m, const cf_family_weight *w, size_t *n);

/* Calls fn for every tensor of m's family in file order (first ones, layer by layer, last
 * ones, the head when untied); stops at and returns the first nonzero result. m->arch must
 * name a family (cf_model_config_check). */
typedef int (*cf_weight_fn)(void *ctx, const cf_family_weight *w, long layer);
int cf_weights_foreach(const cf_model_config *m, cf_weight_fn fn, void *ctx);
/* How many tensors m has (0 when the count overflows). */
size_t cf_weights_count(const cf_model_config *m);

/* A config a checkpoint or importer supplies, checked before anything is sized from it:
 * a known family, positive sizes, heads that divide, the family's rules, every tensor's
 * f32 size representable. err names `source` and the field. */
int cf_model_config_check(const cf_model_config *m, const char *source, cf_error *err);

#endif
