/* The tensors of a LLaMA model in cformers checkpoints: Hugging Face names, [out, in]
 * layout, q/k rows in the interleaved RoPE order. Shared by importers, exporters and
 * the inference model so the name list exists once. */
#ifndef CFORMERS_IO_LLAMA_WEIGHTS_H
#define CFORMERS_IO_LLAMA_WEIGHTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/checkpoint.h"
#include "cformers/error.h"
#include "cformers/model_config.h"

typedef enum llama_weight {
    LW_EMBED,      /* model.embed_tokens.weight          [vocab, dim] */
    LW_ATTN_NORM,  /* model.layers.i.input_layernorm      [dim] */
    LW_WQ,         /* model.layers.i.self_attn.q_proj     [dim, dim] */
    LW_WK,         /* .k_proj                              [kv_dim, dim] */
    LW_WV,         /* .v_proj                              [kv_dim, dim] */
    LW_WO,         /* .o_proj                              [dim, dim] */
    LW_FFN_NORM,   /* model.layers.i.post_attention_layernorm [dim] */
    LW_GATE,       /* model.layers.i.mlp.gate_proj        [hidden, dim] */
    LW_UP,         /* .up_proj                             [hidden, dim] */
    LW_DOWN,       /* .down_proj                           [dim, hidden] */
    LW_FINAL_NORM, /* model.norm.weight                   [dim] */
    LW_LM_HEAD,    /* lm_head.weight                      [vocab, dim], only when untied */
    LW_COUNT
} llama_weight;

/* True for the kinds that exist once per layer. */
int llama_weight_per_layer(llama_weight kind);

/* Writes the tensor name ("model.layers.3.mlp.up_proj.weight") into buf. */
void llama_weight_name(llama_weight kind, long layer, char *buf, size_t size);

/* Shape of the tensor; returns ndim (1 or 2). */
int llama_weight_shape(const cf_model_config *m, llama_weight kind, int64_t shape[2]);

/* Element count of the tensor (the shape's product, checked); false when it does not fit
 * in size_t. Every tensor of a config that passed llama_config_check fits, as f32 too. */
bool llama_weight_numel(const cf_model_config *m, llama_weight kind, size_t *n);

/* Calls fn for every tensor of the model in file order (embedding, layer by layer,
 * final norm, lm_head when untied); stops at and returns the first nonzero result. */
typedef int (*llama_weight_fn)(void *ctx, llama_weight kind, long layer);
int llama_weights_foreach(const cf_model_config *m, llama_weight_fn fn, void *ctx);

/* Basic consistency of a LLaMA config (positive sizes, divisibility, every tensor's f32
 * byte size representable without overflow); err names `source` and the field. */
int llama_config_check(const cf_model_config *m, const char *source, cf_error *err);

/* Fails unless checkpoint c holds at least the tensors m implies (embedding, final norm,
 * 9 per layer, lm_head when untied), so arrays sized from num_layers are bounded by the
 * file; err names the checkpoint and num_layers. *count gets the number implied. */
int llama_ckpt_check_count(const cf_ckpt *c, const cf_model_config *m, size_t *count, cf_error *err);

/* The checkpoint tensor `name` with this shape in a float dtype (f32, bf16, f16),
 * checksum verified; NULL with err naming the file and tensor otherwise. */
const cf_ckpt_tensor *llama_ckpt_float_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape,
                                              cf_error *err);

/* The same, also accepting q8_0 for matrices (the inference model reads them). */
const cf_ckpt_tensor *llama_ckpt_weight_tensor(cf_ckpt *c, const char *name, int ndim, const int64_t *shape,
                                               cf_error *err);

/* Reorders the rows of a q or k projection between the interleaved RoPE layout (pairs
 * (2i, 2i+1) of a head rotate together; Meta, llama2.c, GGUF, cformers) and Hugging Face's
 * rotate-half layout (pairs (i, i + head_dim/2)). Rows are row_bytes long. */
void llama_rows_to_hf(const void *src, void *dst, long heads, long head_dim, size_t row_bytes);
void llama_rows_from_hf(const void *src, void *dst, long heads, long head_dim, size_t row_bytes);

#endif
