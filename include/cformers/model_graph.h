/* Training graphs of the supported architectures, built from a cf_model_config.
 *
 * Parameters are named as in Hugging Face checkpoints (LLaMA: model.embed_tokens.weight,
 * model.layers.{i}.self_attn.q_proj.weight, ...; GPT-2: transformer.wte.weight,
 * transformer.h.{i}.attn.c_attn.weight, ...) with PyTorch nn.Linear layout [out, in]
 * (GPT-2's Conv1D weights are transposed at import). Initialisation follows the
 * reference implementations: normal(0, initializer_range) for matrices and embeddings,
 * ones for norm weights, zeros for biases, GPT-2's residual projections (c_proj) scaled
 * by 1/sqrt(2 * num_layers). */
#ifndef CFORMERS_MODEL_GRAPH_H
#define CFORMERS_MODEL_GRAPH_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stdint.h>

#include "cformers/config.h"
#include "cformers/error.h"
#include "cformers/graph.h"
#include "cformers/model_config.h"
#include "cformers/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_model_graph {
    cf_graph *graph;
    cf_tensor *tokens;  /* input [B, T] i32 */
    cf_tensor *targets; /* input [B, T] i32; negative ids are ignored by the loss */
    cf_tensor *loss;    /* f32 scalar, mean over tokens, kept */
    cf_tensor *logits;  /* [B, T, vocab], kept when keep_logits, else NULL */
    const cf_lora_config *lora; /* the build's adapters (cf_model_build_opts.lora), NULL when none */
    const struct cf_dist_group *tensor_group; /* cf_model_build_opts.tensor_group */
} cf_model_graph;

/* Parameters whose names match `pattern` (fnmatch(3): "model.layers.*.self_attn.*_proj.weight")
 * are frozen in `dtype` (cf_graph_param_freeze). */
typedef struct cf_freeze_rule {
    const char *pattern;
    cf_dtype dtype;
} cf_freeze_rule;

typedef struct cf_model_build_opts {
    bool keep_logits;
    /* Applied in order after the forward is built (before the caller's backward), without
     * the family's builder knowing: a parameter takes the first rule it matches. A rule that
     * matches no parameter is an error naming it (a misspelt pattern never trains the model
     * it did not mean to). */
    const cf_freeze_rule *freeze;
    int n_freeze;
    /* Low-rank adapters (docs/lora.md), NULL or rank 0 for none: each linear the config
     * targets gets A [rank, in] and B [out, rank] ("<module>.lora_A.weight", PEFT's
     * names without its "base_model.model." prefix) and y = x W^T + (alpha / rank) (x A^T)
     * B^T; then every other parameter is frozen (after the freeze rules) in
     * lora->base_dtype, or f32 where that dtype cannot hold it (norms). */
    const cf_lora_config *lora;
    /* Tensor parallelism (docs/distributed.md): NULL or a group of one for none; else this
     * rank's tensor group (cf_dist_group_of(d, CF_GROUP_TENSOR)), and the graph holds this
     * rank's slices of the column- and row-parallel weights, with the group's all-reduces
     * as graph ops. num_heads, num_kv_heads and intermediate_size must divide by its size
     * (an error naming parallel_config.model_parallel otherwise); no adapters yet. */
    const struct cf_dist_group *tensor_group;
} cf_model_build_opts;

/* Builds the forward graph (tokens -> loss) for cfg->arch at batch B and length T
 * (T <= max_position_embeddings). opts may be NULL. The caller then adds the backward
 * (cf_graph_backward) and the update (cf_graph_adamw) and frees out->graph. */
int cf_model_graph_build(const cf_model_config *cfg, int64_t batch, int64_t seq_len, const cf_model_build_opts *opts,
                         cf_model_graph *out, cf_error *err);

/* The memory plan of a full training step (forward, backward, AdamW) at batch B and
 * length T, computed without allocating tensors: what `cformers config show` reports
 * (arena, lower bound, fragmentation, parameter blocks). With `ctx`, the fusion passes
 * it enables run first, as the trainer runs them; NULL plans the unfused graph. The
 * precision pass of cfg->compute_dtype runs either way, as in the trainer. With `rc`, its
 * activation recomputation is applied after the backward (NULL: none). */
int cf_model_graph_memory(const cf_model_config *cfg, const cf_context_config *ctx, const cf_recompute_config *rc,
                          int64_t batch, int64_t seq_len, cf_memory_report *report, cf_error *err);
/* The same for the graph `opts` builds (frozen weights, adapters: their plan has no
 * gradient or moments for the frozen base); opts may be NULL. */
int cf_model_graph_memory_opts(const cf_model_config *cfg, const cf_model_build_opts *opts, const cf_context_config *ctx,
                               const cf_recompute_config *rc, int64_t batch, int64_t seq_len, cf_memory_report *report,
                               cf_error *err);

/* The plan's arena (with its lower bound and fragmentation in `note`, which should hold
 * 256 bytes) and parameter blocks as rows for cf_memory_estimate_print, so the analytic
 * estimate and the plan print side by side. `without`, when not NULL, is the plan of the
 * same step without activation recomputation: the arena row then says what it saves.
 * Frozen weights (cf_memory_report.frozen_bytes) count in the parameter row, its note
 * (also in `note`) saying how much of it they are. Returns the number of rows (2). */
int cf_memory_plan_rows(const cf_memory_report *m, const cf_memory_report *without, cf_memory_row *rows, char *note,
                        size_t note_size);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
