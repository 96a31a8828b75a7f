/* Internal: the graph fusion passes (context.enable_graph_kernel). They rewrite a
 * forward graph, before cf_graph_backward, replacing chains of built-in ops with fused
 * ops whose own backward rules then make the gradients. Each has its own switch in
 * cf_context_config so its effect can be measured (bench/bench_fusion.c). */
#ifndef CFORMERS_PASSES_H
#define CFORMERS_PASSES_H

#include "cformers/config.h"
#include "cformers/graph.h"
#include "cformers/model_config.h"

/* Runs the passes ctx enables (residual + norm only with ctx->enable_graph_kernel). */
int cf_graph_fuse(cf_graph *g, const cf_context_config *ctx, cf_error *err);

/* matmul(x, W^T) -> cross_entropy, the logits read by nothing else and not kept,
 * becomes one linear_cross_entropy (cformers/fused.h). Returns how many it fused. */
int cf_pass_fuse_cross_entropy(cf_graph *g);

/* Projections x W_i^T of one x by 2 or 3 weights adjacent in the parameter block become
 * one product over the stacked weights when it has at least `threshold` elements
 * (out x in features). Returns how many groups it combined. */
int cf_pass_matrix_combine(cf_graph *g, int64_t threshold);

/* add -> rmsnorm becomes one add_rmsnorm, add -> layernorm one add_layernorm (the sum
 * stays an output for the residual stream). Returns how many it fused. */
int cf_pass_fuse_residual_norm(cf_graph *g);

/* Marks every rope node to rotate in place: its output takes its input's storage
 * (cf_node.in_place) where the planner finds the input dead afterwards, as q and k
 * before rotation are. The backward's inverse rotations inherit the mark. Returns how
 * many it marked. */
int cf_pass_rope_in_place(cf_graph *g);

/* Activation recomputation (recompute_config), on a graph whose backward is built:
 * the activations of whole layers (rc->recompute) or of the attention, SwiGLU and GELU
 * nodes (rc->select_recompute) that backward reads are recomputed by clones of their
 * forward nodes placed in the backward just before they are needed; results are
 * bit-identical. Returns how many nodes it cloned, -1 on error. */
int cf_graph_recompute(cf_graph *g, const cf_recompute_config *rc, cf_error *err);

/* Mixed precision (model_config.compute_dtype, pass_precision.c): matmuls, and with bf16
 * flash attention, read their operands in `compute` (CF_BF16 or CF_F16; CF_F32 changes
 * nothing) through inserted casts, the weights' casts kept outside the arena; all else
 * stays f32. Runs after the fusion passes, before cf_graph_backward. Returns how many
 * nodes it converted, -1 on a graph error. */
int cf_pass_precision(cf_graph *g, cf_dtype compute);

/* The passes a training graph of `model` gets from the config, in order: the fusion
 * passes of ctx (NULL: none), then the precision pass for model->compute_dtype. */
int cf_graph_apply_passes(cf_graph *g, const cf_context_config *ctx, const cf_model_config *model, cf_error *err);

#endif
