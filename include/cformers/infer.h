/* Inference for every model family (LLaMA, GPT-2; src/models/family.h): a model with a
 * contiguous KV cache, batched prefill and token-by-token decode, a sampler and a
 * streaming generation loop.
 *
 * A model comes from a cformers checkpoint (weights used in place from the memory map
 * when their dtype is the one asked for) or from live f32 weights looked up by name
 * (the trainer samples from the weights it is training, without a file round trip). */
#ifndef CFORMERS_INFER_H
#define CFORMERS_INFER_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/dtype.h"
#include "cformers/error.h"
#include "cformers/model_config.h"
#include "cformers/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_infer_model cf_infer_model;

/* The dtype the KV cache stores keys and values in. bf16 halves the cache's memory and the
 * bytes each decode step reads from it; keys and values are rounded to nearest even bf16
 * when written (after RoPE), so attention sees them to about 3 significant digits, the
 * precision bf16 weights already have. Attention itself still computes in f32. */
typedef enum cf_kv_cache_dtype {
    CF_KV_AUTO = 0, /* f32 weights keep an f32 cache, bf16 and q8_0 weights a bf16 one */
    CF_KV_F32 = 1,
    CF_KV_BF16 = 2,
    CF_KV_Q8_0 = 3, /* each head's slice of a row as q8_0 blocks of 32 (f16 scale max|x|/127, int8
                       round to nearest; a head_dim not a multiple of 32 ends in a zero-padded
                       block): 34 bytes per 32 values, 26.6% of f32 */
} cf_kv_cache_dtype;

typedef struct cf_infer_options {
    cf_dtype weight_dtype; /* CF_F32, CF_BF16, CF_Q8_0 or CF_Q4_0: the dtype matmuls read; other stored dtypes are
                              converted at load. CF_DTYPE_COUNT: as the checkpoint stores its matrices (f16 read as
                              f32; cf_infer_load only) */
    long max_seq;          /* KV cache length in tokens, at most (and by default, 0) the config's
                              max_position_embeddings */
    cf_kv_cache_dtype kv_cache; /* default (0): follows weight_dtype */
    const char *lora;           /* an adapter applied unmerged, "PATH[:SCALE]" (cf_infer_set_lora); NULL = none */
} cf_infer_options;

/* The dtype the model's matmuls read (weight_dtype once resolved). */
cf_dtype cf_infer_weight_dtype(const cf_infer_model *m);

/* Loads a checkpoint written by `cformers convert` or the trainer (any family's weights,
 * see docs/checkpoint-format.md). opt may be NULL (f32, full context). */
cf_infer_model *cf_infer_load(const char *checkpoint_path, const cf_infer_options *opt, cf_error *err);

/* Returns the f32 data of weight `name` (HF names as in docs/checkpoint-format.md) with
 * the given shape, or NULL when the model has no such tensor. */
typedef const float *(*cf_weight_lookup_fn)(void *ctx, const char *name, int ndim, const int64_t *shape);

/* Builds a model over live weights: with weight_dtype f32 they are used in place (they
 * must outlive the model and may change between calls), with bf16 they are copied. */
cf_infer_model *cf_infer_from_weights(const cf_model_config *cfg, cf_weight_lookup_fn lookup, void *ctx,
                                      const cf_infer_options *opt, cf_error *err);
void cf_infer_free(cf_infer_model *m);
/* Applies a low-rank adapter unmerged (docs/lora.md): spec is "PATH[:SCALE]", PATH a
 * Hugging Face PEFT directory or a LoRA run's checkpoint; every adapted linear then adds
 * SCALE * alpha / rank * (x A^T) B^T to its product. Replaces any adapter set before. */
int cf_infer_set_lora(cf_infer_model *m, const char *spec, cf_error *err);
/* Adds an adapter to the model's served set (serve --lora NAME=PATH[:SCALE], docs/lora.md):
 * it applies only to the rows of a batched step whose segment names it (infer_segment.lora),
 * unmerged, over the shared base product; the base and any cf_infer_set_lora adapter are
 * unchanged. Returns its id (1, 2, ...), or -1 with err (a missing or mismatched adapter, a
 * LoRA checkpoint trained over another base). Before the model is given to an engine
 * (cf_serve_engine_new), which reads the set from its own thread. */
int cf_infer_add_lora(cf_infer_model *m, const char *spec, cf_error *err);
/* Adapters in the served set. */
int cf_infer_lora_count(const cf_infer_model *m);

const cf_model_config *cf_infer_config(const cf_infer_model *m);
long cf_infer_max_seq(const cf_infer_model *m);
/* Bytes of matmul weights one decode step reads (for bandwidth reports). */
size_t cf_infer_weight_bytes(const cf_infer_model *m);
/* The KV cache's dtype (CF_F32, CF_BF16 or CF_Q8_0) and its size in bytes (keys and values, all
 * layers, max_seq positions). */
cf_dtype cf_infer_kv_dtype(const cf_infer_model *m);
size_t cf_infer_kv_cache_bytes(const cf_infer_model *m);
/* The tokenizer embedded in the checkpoint, or NULL; owned by the model. */
const cf_tokenizer *cf_infer_tokenizer(const cf_infer_model *m);
/* The chat template the checkpoint carries (Jinja source, from the model's
 * tokenizer_config.json or GGUF tokenizer.chat_template), or NULL; owned by the model. */
const char *cf_infer_chat_template(const cf_infer_model *m);

/* Runs `n` tokens at positions pos .. pos+n-1 as one batch, appending their keys and
 * values to the cache (which must already hold positions 0 .. pos-1 of this sequence).
 * logits receives [n, vocab] with all_logits, else the last token's [vocab]. Denormal
 * floats count as zero in it, as in every product (gemm.h). */
int cf_infer_forward(cf_infer_model *m, const int32_t *tokens, long n, long pos, float *logits, bool all_logits,
                     cf_error *err);

/* ---- sampling ---- */

typedef struct cf_sampler_params {
    float temperature; /* 0 = greedy (argmax) */
    int top_k;         /* keep the k most likely tokens; 0 = all */
    float top_p;       /* keep the smallest set with this much probability; 0 or 1 = all */
    uint64_t seed;
} cf_sampler_params;

typedef struct cf_sampler cf_sampler;
cf_sampler *cf_sampler_new(const cf_sampler_params *p, long vocab_size);
void cf_sampler_free(cf_sampler *s);
/* Picks the next token from logits[vocab_size] (overwritten with probabilities). */
int32_t cf_sampler_sample(cf_sampler *s, float *logits);

/* ---- generation ---- */

typedef struct cf_generate_params {
    long max_new_tokens;
    cf_sampler_params sampling;
} cf_generate_params;

typedef struct cf_generate_stats {
    long prompt_tokens;    /* including BOS */
    long generated_tokens;
    double prefill_seconds, decode_seconds;
    bool stopped_at_eos;
} cf_generate_stats;

/* Receives each new token and its text as it is produced. */
typedef void (*cf_token_fn)(void *ctx, int32_t token, const char *piece, size_t len);

/* Encodes `prompt` (BOS first when the vocabulary has one), prefills it in one batched
 * pass, then decodes until EOS (or a new BOS), max_new_tokens or the end of the cache.
 * The generated ids are also stored in out_ids (capacity max_new_tokens) when not NULL. */
int cf_generate(cf_infer_model *m, const cf_tokenizer *tok, const char *prompt, const cf_generate_params *p,
                cf_token_fn on_token, void *ctx, int32_t *out_ids, cf_generate_stats *stats, cf_error *err);

/* ---- forward-alignment validation (docs/validate-reference.md) ---- */

/* Logits a reference implementation computed for a prompt. */
typedef struct cf_logits_reference {
    int32_t *tokens;
    float *logits; /* [n_tokens, vocab] */
    long n_tokens, vocab;
} cf_logits_reference;

int cf_logits_reference_load(const char *path, cf_logits_reference *ref, cf_error *err);
void cf_logits_reference_free(cf_logits_reference *ref);

typedef struct cf_validate_row {
    double max_abs;  /* max |model - reference| over the vocabulary */
    double max_rel;  /* max_abs / max |reference| (scale-free) */
    int32_t argmax_model, argmax_reference;
} cf_validate_row;

/* Runs the reference's tokens through the model in one batch from position 0 and fills
 * rows[n_tokens]. Fails when the vocabulary or length does not fit the model. */
int cf_validate(cf_infer_model *m, const cf_logits_reference *ref, cf_validate_row *rows, cf_error *err);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
