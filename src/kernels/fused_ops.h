/* Internal: the fused op definitions, for the fusion passes (src/core/pass_*.c). */
#ifndef CFORMERS_FUSED_OPS_H
#define CFORMERS_FUSED_OPS_H

#include "cformers/op.h"

extern const cf_op_def cf_op_flash_attention, cf_op_flash_attention_backward;
extern const cf_op_def cf_op_linear_cross_entropy, cf_op_add_rmsnorm, cf_op_add_layernorm;
/* y_i = x W_i^T over 2 (index 0) or 3 (index 1) weights adjacent in the parameter block. */
extern const cf_op_def cf_op_linear_combined[2];

#endif
