/* The fusion pass driver: which passes run, from the context section's switches. */
#include "core/graph_internal.h"
#include "core/passes.h"

int cf_graph_fuse(cf_graph *g, const cf_context_config *ctx, cf_error *err) {
    if (g->differentiated) return cf_fail(err, "fusion passes must run before the backward is built");
    if (!ctx->enable_graph_kernel) return 0;
    if (ctx->enable_matrix_combine) cf_pass_matrix_combine(g, ctx->matrix_combine_threshold);
    if (ctx->fuse_residual_norm) cf_pass_fuse_residual_norm(g);
    if (ctx->fuse_cross_entropy) cf_pass_fuse_cross_entropy(g);
    if (ctx->fuse_rope) cf_pass_rope_in_place(g);
    return cf_graph_error(g, err);
}
