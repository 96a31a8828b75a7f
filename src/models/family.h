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
    WR_QKV,             /* fused q, k, v rows               [3 dim, dim] */
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
    WR_COUNT
} cf_weight_role;

/* A tensor dimension in terms of the config. */
typedef enum cf_weight_dim {
    WD_VOCAB = 1,
    WD_HIDDEN, /* hidden_size */
    WD_KV,     /* num_kv_heads * head_dim */
    WD_FF,     /* intermediate_size */
    WD_POS,    /* max_position_embeddings */
    WD_QKV,    /* 3 * hidden_size */
} cf_weight_dim;

/* Where a tensor sits in file order: before the layers, once per layer, after them, or
 * after them only when tie_word_embeddings is false. */
typedef enum cf_weight_place { WP_FIRST, WP_LAYER, WP_LAST, WP_UNTIED } cf_weight_place;

typedef enum cf_weight_init { WI_NORMAL, WI_NORMAL_RESIDUAL, WI_ONES, WI_ZEROS } cf_weight_init;

/* How Hugging Face stores the tensor relative to cformers' [out, in] rows: as is, q/k rows
 * in rotate-half order (LLaMA), or transposed ([in, out], GPT-2's Conv1D). */
typedef enum cf_hf_layout { HF_AS_IS, HF_ROPE_Q, HF_ROPE_K, HF_CONV1D } cf_hf_layout;

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
} cf_family_weight;

/* The pieces a family's pre-norm decoder block is made of. The training graph builder
 * (transformer.c) and the inference block (src/infer/block.c) both read them, so a family
 * composed of existing pieces needs no graph or inference code of its own. Whether a
 * projection or norm has a bias is the table's: the role after it (WR_QKV_BIAS after
 * WR_QKV, ...) is present. */
typedef enum cf_norm_kind { CF_NORM_RMS, CF_NORM_LAYER } cf_norm_kind;          /* RMSNorm, LayerNorm */
typedef enum cf_position_kind { CF_POS_ROPE, CF_POS_LEARNED } cf_position_kind; /* rotary, added table */
typedef enum cf_mlp_kind { CF_MLP_SWIGLU, CF_MLP_GELU } cf_mlp_kind;            /* gate/up/down, fc/proj */

typedef struct cf_block_recipe {
    cf_norm_kind norm;
    cf_position_kind position;
    cf_mlp_kind mlp;
    bool fused_qkv; /* one [3 dim, dim] projection (WR_QKV), else WR_WQ, WR_WK, WR_WV */
} cf_block_recipe;

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

/* True when the family stores a bias for `role` (the role after it in cf_weight_role). */
bool cf_family_has_bias(const cf_family *f, cf_weight_role role);

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
