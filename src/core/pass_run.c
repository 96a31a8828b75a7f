/* The fusion pass driver: which passes run, from the context section's switches. Each
 * fusion MindFormers also has under a name of its own keeps its own switch (qkv_concat is
 * enable_matrix_combine, its fused softmax cross-entropy fuse_cross_entropy, its fused
 * RoPE fuse_rope); context.enable_graph_kernel keeps MindFormers' meaning, the automatic
 * fusion of element-wise ops into their neighbours, which here is residual add + norm. So
 * MindFormers' usual enable_graph_kernel: False turns off only that one. */
#include "core/graph_internal.h"
#include "core/passes.h"

int cf_graph_fuse(cf_graph *g, const cf_context_config *ctx, cf_error *err) {
    if (g->differentiated) return cf_fail(err, "fusion passes must run before the backward is built");
    if (ctx->enable_matrix_combine) cf_pass_matrix_combine(g, ctx->matrix_combine_threshold);
    if (ctx->enable_graph_kernel && ctx->fuse_residual_norm) cf_pass_fuse_residual_norm(g);
    if (ctx->fuse_cross_entropy) cf_pass_fuse_cross_entropy(g);
    if (ctx->fuse_rope) cf_pass_rope_in_place(g);
    return cf_graph_error(g, err);
}

int cf_graph_apply_passes(cf_graph *g, const cf_context_config *ctx, const cf_model_config *model, cf_error *err) {
    if (ctx && cf_graph_fuse(g, ctx, err) != 0) return -1;
    if (g->differentiated) return cf_fail(err, "the precision pass must run before the backward is built");
    if (model && cf_pass_precision(g, model->compute_dtype) < 0) return cf_graph_error(g, err);
    return cf_graph_error(g, err);
}
