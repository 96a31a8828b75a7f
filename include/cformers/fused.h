/* Fused ops: single kernels that replace a chain of built-in ops (graph.h) with the same
 * result and less memory traffic. Model builders use them directly when the config asks
 * (model_config.use_flash_attention); the fusion passes (context.enable_graph_kernel)
 * put them in place of the unfused chains. */
#ifndef CFORMERS_FUSED_H
#define CFORMERS_FUSED_H

#include "cformers/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Causal grouped-query attention as cf_nn_attention (q [B, T, H, hd], k and v
 * [B, T, KV, hd], H a multiple of KV), computed tile by tile with an online softmax
 * (FlashAttention-2): it saves one log-sum-exp per query row instead of the [B, H, T, T]
 * probabilities, and its backward recomputes them, so memory grows linearly with T. */
cf_tensor *cf_nn_flash_attention(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v);

#ifdef __cplusplus
}
#endif
#endif
