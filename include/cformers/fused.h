/* Fused ops: single kernels that replace a chain of built-in ops (graph.h) with the same
 * result and less memory traffic. Model builders use them directly when the config asks
 * (model_config.use_flash_attention); the fusion passes (context.fuse_* and
 * enable_matrix_combine; docs/fusion.md) put them in place of the unfused chains. */
#ifndef CFORMERS_FUSED_H
#define CFORMERS_FUSED_H
#include "cformers/export.h"
CF_API_BEGIN

#include "cformers/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Causal grouped-query attention as cf_nn_attention (q [B, T, H, hd], k and v
 * [B, T, KV, hd], H a multiple of KV), computed tile by tile with an online softmax
 * (FlashAttention-2): it saves one log-sum-exp per query row instead of the [B, H, T, T]
 * probabilities, and its backward recomputes them, so memory grows linearly with T.
 * q, k, v are all f32 or all bf16 (cf_nn_cast makes bf16 ones); the output is f32 either
 * way, and the gradients of q, k, v have their dtype. With bf16 the tile products take
 * bf16 operands (AMX or vdpbf16ps where the CPU has them), the probabilities and their
 * gradients rounded to bf16 for them, and everything is summed in f32. */
cf_tensor *cf_nn_flash_attention(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v);

/* cf_nn_cross_entropy(cf_nn_linear(x, w, NULL), targets) without the [tokens, vocab]
 * logits: x [..., D], w [V, D], targets [...] i32 (negative = ignored); the mean loss.
 * It takes the tokens a chunk at a time and computes the gradients for x and w in the
 * same pass (its backward scales them; w's goes straight into the gradient block when the
 * backward's seed is an input or a constant); a forward-only run makes only the loss
 * when w's gradient goes there, else it does that work too. */
cf_tensor *cf_nn_linear_cross_entropy(cf_graph *g, cf_tensor *x, cf_tensor *w, cf_tensor *targets);

/* Tokens per chunk of cf_nn_linear_cross_entropy for `tokens` rows over `vocab` classes:
 * as many as keep one chunk of logits within 64 MiB (at least 256, so that its three
 * matrix products stay efficient), in chunks of equal size. Its workspace holds one chunk;
 * memory estimates use the same rule. */
long cf_cross_entropy_chunk_rows(long tokens, long vocab);

/* Bytes of the logits a chunk of `chunk` rows needs in that workspace, for x and w of
 * `dtype`: the f32 logits of the chunk; with bf16, the f32 logits of a part of it at a
 * time and the bf16 gradient of the whole chunk. */
size_t cf_cross_entropy_logits_bytes(long chunk, long vocab, cf_dtype dtype);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
