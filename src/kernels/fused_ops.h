/* Internal: the fused op definitions, for the fusion passes (src/core/pass_*.c). */
#ifndef CFORMERS_FUSED_OPS_H
#define CFORMERS_FUSED_OPS_H

#include "cformers/graph.h"
#include "cformers/op.h"

extern const cf_op_def cf_op_flash_attention, cf_op_flash_attention_backward;
extern const cf_op_def cf_op_linear_cross_entropy, cf_op_add_rmsnorm, cf_op_add_layernorm;
/* cf_nn_linear_cross_entropy with chunk_rows tokens per chunk (0: the usual rule), so
 * tests can cross chunk boundaries with small shapes. */
cf_tensor *cf_nn_linear_cross_entropy_chunked(cf_graph *g, cf_tensor *x, cf_tensor *w, cf_tensor *targets,
                                              long chunk_rows);
/* y_i = x W_i^T over 2 (index 0) or 3 (index 1) weights adjacent in the parameter block. */
extern const cf_op_def cf_op_linear_combined[2];

#endif
