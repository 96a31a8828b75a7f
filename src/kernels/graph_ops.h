/* Internal helpers for the built-in graph ops (src/kernels/op_*.c): building a node
 * and getting its result, input checks for infer rules, and the op definitions the
 * registry lists. */
#ifndef CFORMERS_GRAPH_OPS_H
#define CFORMERS_GRAPH_OPS_H

#include "cformers/graph.h"
#include "cformers/op.h"
#include "kernels/attn_mask.h"

/* Appends a node and returns its output 0 (NULL on error, recorded in g). */
cf_tensor *cf_op_apply(cf_graph *g, const cf_op_def *op, cf_tensor *const *inputs, int n_inputs, const cf_attrs *attrs);

/* Fails unless input i has dtype `dtype`. */
int cf_require_dtype(const cf_node *n, int i, cf_dtype dtype, cf_error *err);
/* Fails unless inputs i and j have the same shape. */
int cf_require_same_shape(const cf_node *n, int i, int j, cf_error *err);

/* A 2-D [rows, cols] view of t (t itself when already 2-D). */
cf_tensor *cf_flatten_2d(cf_graph *g, cf_tensor *t);

/* dst = src over n floats, split over the pool. */
void cf_ops_copy(float *dst, const float *src, long n);

/* Row chunks for deterministic reductions: the split does not depend on the thread
 * count, so sums come out bit-identical however many threads run. */
enum { CF_REDUCE_CHUNKS = 32 };
static inline long cf_reduce_chunks(long rows) { return rows < CF_REDUCE_CHUNKS ? rows : CF_REDUCE_CHUNKS; }

static inline const float *cf_in(const cf_node *n, int i) { return (const float *)n->inputs[i]->data; }
static inline float *cf_out(const cf_node *n, int k) { return (float *)n->outputs[k]->data; }

/* The mask of an attention node and of its backward (kernels/attn_mask.h), held in the
 * attrs slots no attention op uses otherwise; zero attrs are the causal mask, as
 * cf_nn_attention and cf_nn_flash_attention build. */
enum { CF_ATTR_MASK_WINDOW = 6, CF_ATTR_MASK_NONCAUSAL = 7 }; /* attrs.i */
enum { CF_ATTR_MASK_SOFTCAP = 7 };                             /* attrs.f */
static inline cf_attn_mask cf_attrs_mask(const cf_attrs *a) {
    return (cf_attn_mask){.causal = a->i[CF_ATTR_MASK_NONCAUSAL] == 0, .window = (long)a->i[CF_ATTR_MASK_WINDOW],
                          .softcap = (float)a->f[CF_ATTR_MASK_SOFTCAP]};
}
static inline void cf_attrs_set_mask(cf_attrs *a, const cf_attn_mask *m) {
    a->i[CF_ATTR_MASK_NONCAUSAL] = !m->causal;
    a->i[CF_ATTR_MASK_WINDOW] = m->window;
    a->f[CF_ATTR_MASK_SOFTCAP] = m->softcap;
}

/* Grouped-query attention (unfused, or flash) under `mask`; a mask the kernels do not
 * implement fails when the node is added (cf_attn_mask_check). */
cf_tensor *cf_nn_attention_masked(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v, const cf_attn_mask *mask);
cf_tensor *cf_nn_flash_attention_masked(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v,
                                        const cf_attn_mask *mask);

extern const cf_op_def cf_op_add, cf_op_mul, cf_op_scale, cf_op_add_broadcast, cf_op_sum_leading;
extern const cf_op_def cf_op_reshape, cf_op_cast, cf_op_matmul, cf_op_embedding, cf_op_embedding_backward;
extern const cf_op_def cf_op_rmsnorm, cf_op_rmsnorm_backward, cf_op_layernorm, cf_op_layernorm_backward;
extern const cf_op_def cf_op_rope, cf_op_attention, cf_op_attention_backward;
extern const cf_op_def cf_op_swiglu, cf_op_swiglu_backward, cf_op_gelu, cf_op_gelu_backward;
extern const cf_op_def cf_op_softcap, cf_op_softcap_backward;
extern const cf_op_def cf_op_cross_entropy, cf_op_cross_entropy_backward;
extern const cf_op_def cf_op_split[CF_MAX_OUTPUTS - 1], cf_op_concat; /* split2, split3, split4 */
/* cf_nn_split into parts of the given widths along the last dimension (NULL: equal). */
int cf_nn_split_widths(cf_graph *g, cf_tensor *x, int parts, const int64_t *widths, cf_tensor **out);
extern const cf_op_def cf_op_grad_accumulate, cf_op_grad_norm, cf_op_adamw;

#endif
