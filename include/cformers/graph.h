/* The static computation graph: build once, differentiate, plan, run every step.
 *
 *     cf_graph *g = cf_graph_create();
 *     int64_t bt[2] = {B, T};
 *     cf_tensor *tokens = cf_graph_input(g, "tokens", CF_I32, 2, bt);
 *     cf_tensor *w = cf_graph_param(g, "wte", 2, (int64_t[]){V, D}, cf_init_normal(0.02f), true);
 *     ... cf_tensor *loss = cf_nn_cross_entropy(g, logits, targets);
 *     cf_graph_backward(g, loss, &err);                 // reverse-mode autodiff
 *     cf_tensor *lr = cf_graph_input(g, "lr", CF_F32, 0, NULL);
 *     cf_graph_adamw(g, &adamw_cfg, lr);                // the update, in the same graph
 *     cf_plan *plan = cf_plan_create(g, &err);          // memory plan + binding (plan.h)
 *     ... write tokens->data, lr->data; cf_plan_run(plan, CF_PHASE_ALL);
 *
 * Builder functions (cf_graph_* and cf_nn_*) record the first error in the graph and
 * return NULL from then on, so a model can be built without checking every call;
 * cf_graph_error() reports it. Every node is appended after its inputs, so the order
 * nodes are added in is a valid execution order.
 *
 * Parameters are f32 and live in ONE contiguous block; their gradients and both Adam
 * moments live in blocks with the same layout (cf_tensor.param_offset), so zeroing,
 * the optimizer, all-reduce buckets and checkpoints are flat loops. */
#ifndef CFORMERS_GRAPH_H
#define CFORMERS_GRAPH_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stdint.h>

#include "cformers/error.h"
#include "cformers/op.h"
#include "cformers/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

cf_graph *cf_graph_create(void);
void cf_graph_free(cf_graph *g);

/* 0 when every builder call so far succeeded; else -1 with the first error in err. */
int cf_graph_error(const cf_graph *g, cf_error *err);
/* Records an error (the first one wins); returns NULL for `return cf_graph_fail(...)`. */
cf_tensor *cf_graph_fail(cf_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Leaves ---------------------------------------------------------------------- */

typedef enum cf_init_kind { CF_INIT_ZEROS = 0, CF_INIT_ONES, CF_INIT_NORMAL, CF_INIT_UNIFORM } cf_init_kind;
typedef struct cf_init {
    cf_init_kind kind;
    float std; /* CF_INIT_NORMAL: normal(0, std); CF_INIT_UNIFORM: uniform(-std, std) */
} cf_init;
static inline cf_init cf_init_normal(float std) { return (cf_init){CF_INIT_NORMAL, std}; }
static inline cf_init cf_init_uniform(float bound) { return (cf_init){CF_INIT_UNIFORM, bound}; }
static inline cf_init cf_init_ones(void) { return (cf_init){CF_INIT_ONES, 0.0f}; }
static inline cf_init cf_init_zeros(void) { return (cf_init){CF_INIT_ZEROS, 0.0f}; }

/* Data the caller writes before running (shape NULL when ndim is 0). */
cf_tensor *cf_graph_input(cf_graph *g, const char *name, cf_dtype dtype, int ndim, const int64_t *shape);
/* A trainable f32 weight, placed in the parameter block in creation order. weight_decay
 * says whether AdamW's decoupled decay applies to it (matrices yes, norms and biases no).
 * Names must be unique among parameters. */
cf_tensor *cf_graph_param(cf_graph *g, const char *name, int ndim, const int64_t *shape, cf_init init,
                          bool weight_decay);
/* Freezes parameter p: it leaves the parameter block (so it has no gradient, no Adam
 * moments, and is never in the optimizer, the gradient sync or cf_graph_param_at) and is
 * stored in `dtype` (CF_F32, CF_BF16, CF_F16, CF_Q8_0 or CF_Q4_0) in a frozen block of its
 * own, with role CF_ROLE_FROZEN. Gradients still flow through it to the tensors it is
 * combined with (a matmul's backward reads the weight in its dtype). After the forward is
 * built, before cf_graph_backward and before the blocks are requested; the nodes reading p
 * are checked again with the new dtype (in low precision only a matmul's second operand
 * takes it; anything else is an error naming the op). Trainable parameters keep their
 * initialisation streams (cf_plan_init_params), so freezing one changes no other's values. */
int cf_graph_param_freeze(cf_graph *g, cf_tensor *p, cf_dtype dtype, cf_error *err);
/* Frozen parameters in the order they were frozen, and their initialisation. */
int cf_graph_num_frozen(const cf_graph *g);
cf_tensor *cf_graph_frozen_at(const cf_graph *g, int i);

/* Fixed data, copied now, read-only at run time. */
cf_tensor *cf_graph_const(cf_graph *g, const char *name, cf_dtype dtype, int ndim, const int64_t *shape,
                          const void *data);
/* Marks t as a graph output: its storage is not reused, so it stays readable after a run. */
void cf_graph_keep(cf_graph *g, cf_tensor *t);
/* Renames t (printf-style); returns t. */
cf_tensor *cf_tensor_set_name(cf_tensor *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- Nodes ----------------------------------------------------------------------- */

/* Appends a node running `op` on the inputs; its outputs are new tensors shaped by the
 * op's infer rule. Returns NULL (error recorded) on a bad input. */
cf_node *cf_graph_node_add(cf_graph *g, const cf_op_def *op, cf_tensor *const *inputs, int n_inputs,
                           const cf_attrs *attrs);

int cf_graph_num_nodes(const cf_graph *g);
cf_node *cf_graph_node(const cf_graph *g, int i);
int cf_graph_num_tensors(const cf_graph *g);
cf_tensor *cf_graph_tensor(const cf_graph *g, int i);
/* First tensor with that name, or NULL. */
cf_tensor *cf_graph_find(const cf_graph *g, const char *name);

/* ---- Parameters and their blocks --------------------------------------------------- */

int cf_graph_num_params(const cf_graph *g);
/* Parameter i in block order: name, shape, param_offset, weight_decay. */
cf_tensor *cf_graph_param_at(const cf_graph *g, int i);
cf_init cf_graph_param_init(const cf_graph *g, int i);
/* Total elements in the parameter block (= each of the gradient / moment blocks). */
int64_t cf_graph_param_elems(const cf_graph *g);
/* The part [lo, hi) of the parameter block whose optimizer state this process holds and
 * updates: all of it, unless the optimizer is sharded over data-parallel ranks (ZeRO-1,
 * cf_graph_shard_optimizer); the Adam moment blocks then hold hi - lo elements. */
void cf_graph_optimizer_range(const cf_graph *g, int64_t *lo, int64_t *hi);
/* Shards the optimizer: this process keeps the moments of [lo, hi) only and AdamW
 * updates that range (the caller reduce-scatters the gradients into it and all-gathers
 * the weights after). Before planning; the moment blocks shrink to hi - lo. */
int cf_graph_shard_optimizer(cf_graph *g, int64_t lo, int64_t hi, cf_error *err);

/* The whole blocks as 1-D tensors (shape [param_elems]) and the optimizer step count
 * (i32 scalar). Creating the first parameter after one of these is requested is an error. */
typedef struct cf_param_blocks {
    cf_tensor *params, *grads, *adam_m, *adam_v, *step;
} cf_param_blocks;
cf_param_blocks cf_graph_blocks(cf_graph *g);

/* ---- Built-in ops (all f32 unless noted; "..." = any leading dimensions) ------------ */

cf_tensor *cf_nn_add(cf_graph *g, cf_tensor *a, cf_tensor *b);   /* same shapes */
cf_tensor *cf_nn_mul(cf_graph *g, cf_tensor *a, cf_tensor *b);   /* same shapes */
cf_tensor *cf_nn_scale(cf_graph *g, cf_tensor *a, float s);
/* x + b where b's shape equals x's trailing dimensions (bias, position embeddings). */
cf_tensor *cf_nn_add_broadcast(cf_graph *g, cf_tensor *x, cf_tensor *b);
/* Sums x over its leading dimensions down to `ndim` trailing ones. */
cf_tensor *cf_nn_sum_leading(cf_graph *g, cf_tensor *x, int ndim);
/* A view with another shape and the same elements. */
cf_tensor *cf_nn_reshape(cf_graph *g, cf_tensor *x, int ndim, const int64_t *shape);
/* x converted to `dtype`, f32 <-> bf16 (rounding to nearest even; x itself when it has
 * that dtype already). Its gradient is the incoming one converted to x's dtype (the
 * rounding counts as the identity, as in mixed-precision training). */
cf_tensor *cf_nn_cast(cf_graph *g, cf_tensor *x, cf_dtype dtype);

/* Cuts x's last dimension into `parts` (2 to 4) equal pieces, written to out[0..parts);
 * returns -1 (error recorded) on a bad split. */
int cf_nn_split(cf_graph *g, cf_tensor *x, int parts, cf_tensor **out);

/* op(a) op(b), a and b seen as matrices: a's last dimension is its columns and all
 * others its rows (trans_a then needs a 2-D a). Result [..., N] without trans_a. */
cf_tensor *cf_nn_matmul(cf_graph *g, cf_tensor *a, cf_tensor *b, bool trans_a, bool trans_b);
/* x[..., in] W^T + b with W stored [out, in] as PyTorch's nn.Linear; b may be NULL. */
cf_tensor *cf_nn_linear(cf_graph *g, cf_tensor *x, cf_tensor *w, cf_tensor *b);

/* weight[V, D] gathered at ids (i32, any shape) -> [ids..., D]. Ids out of [0, V) are
 * an error at run time (the kernel clamps nothing: it aborts naming the tensor). */
cf_tensor *cf_nn_embedding(cf_graph *g, cf_tensor *weight, cf_tensor *ids);

cf_tensor *cf_nn_rmsnorm(cf_graph *g, cf_tensor *x, cf_tensor *weight, float eps);
cf_tensor *cf_nn_layernorm(cf_graph *g, cf_tensor *x, cf_tensor *weight, cf_tensor *bias, float eps);

/* RoPE table for positions 0..max_positions-1 (a constant [2, max_positions, head_dim/2]:
 * cos then sin), interleaved-pairs convention, LLaMA-3 scaling when scaling_factor > 1. */
typedef struct cf_rope_config {
    int64_t head_dim, max_positions;
    double theta;
    double scaling_factor, low_freq_factor, high_freq_factor; /* factor 0 or 1: none */
    int64_t original_max_position;
} cf_rope_config;
cf_tensor *cf_nn_rope_table(cf_graph *g, const cf_rope_config *cfg);
/* Rotates x [B, T, heads, head_dim]; token t is at position t. Interleaved pairs
 * (x[2i], x[2i+1]); _neox: the halves (x[i], x[i + head_dim/2]) of HF's rotate_half. */
cf_tensor *cf_nn_rope(cf_graph *g, cf_tensor *x, cf_tensor *table);
cf_tensor *cf_nn_rope_neox(cf_graph *g, cf_tensor *x, cf_tensor *table);

/* Causal grouped-query attention: q [B, T, H, hd], k and v [B, T, KV, hd] with H a
 * multiple of KV; softmax(q k^T / sqrt(hd)) v -> [B, T, H, hd]. */
cf_tensor *cf_nn_attention(cf_graph *g, cf_tensor *q, cf_tensor *k, cf_tensor *v);

cf_tensor *cf_nn_swiglu(cf_graph *g, cf_tensor *gate, cf_tensor *up); /* silu(gate) * up */
cf_tensor *cf_nn_gelu(cf_graph *g, cf_tensor *x);                     /* tanh approximation */
/* c tanh(x / c), c > 0 (Gemma 2's final logit soft-cap) */
cf_tensor *cf_nn_softcap(cf_graph *g, cf_tensor *x, float c);

/* Mean over tokens of -log softmax(logits)[target]: logits [..., V] f32, targets [...]
 * i32; tokens whose target is negative are ignored (PyTorch's ignore_index). Scalar. */
cf_tensor *cf_nn_cross_entropy(cf_graph *g, cf_tensor *logits, cf_tensor *targets);

/* ---- Autodiff and the optimizer ------------------------------------------------------ */

/* Appends the backward pass of scalar `loss`: afterwards every parameter the loss
 * depends on has its gradient ADDED into the gradient block (t->grad is that view), so
 * several micro-batches accumulate; the AdamW update (or cf_plan_zero_grads) clears it.
 * Gradients of a tensor used several times are summed. Call once per graph. */
int cf_graph_backward(cf_graph *g, cf_tensor *loss, cf_error *err);
/* The same with d loss / d y given by the tensor dy (same shape as y) instead of 1. */
int cf_graph_backward_from(cf_graph *g, cf_tensor *y, cf_tensor *dy, cf_error *err);

typedef struct cf_adamw_config {
    float beta1, beta2, eps;
    float weight_decay;  /* decoupled: p -= lr * wd * p, for parameters with weight_decay */
    float max_grad_norm; /* clip the global gradient norm to this; <= 0: no clipping */
} cf_adamw_config;

/* Appends the update phase: the global L2 norm of the gradient block (returned, a kept
 * f32 scalar, so it can be logged), then AdamW with bias correction over the whole
 * parameter block, the learning rate read from the f32 scalar `lr` at run time (so a
 * schedule needs no rebuild), and the gradient block zeroed for the next step. When the
 * norm is not finite (an overflow under loss scaling) the step is skipped: weights,
 * moments and the step count stay, the gradients are cleared. The norm's producer also
 * has the gradient-flow statistics: its input 1 is an i32 scalar input "grad_stats"
 * (default 0) and, on steps run with it set, its output 1 ([n_params] f32, kept) holds
 * each parameter's sum of squared gradients (cf_graph_grad_stats). */
cf_tensor *cf_graph_adamw(cf_graph *g, const cf_adamw_config *cfg, cf_tensor *lr);

/* The same for gradients that hold the loss times a scale (loss scaling): `unscale`, an
 * f32 scalar input, holds 1 / scale at run time; the norm returned and the statistics are
 * of the unscaled gradients and AdamW applies them unscaled. A step whose scaled gradients
 * overflowed (an inf or NaN, seen as a non-finite norm) is skipped as above. */
cf_tensor *cf_graph_adamw_scaled(cf_graph *g, const cf_adamw_config *cfg, cf_tensor *lr, cf_tensor *unscale);

/* From the norm cf_graph_adamw returned: the switch to set before a step whose per-
 * parameter gradient statistics are wanted, and where they land (in parameter order). */
typedef struct cf_grad_stats_tensors {
    cf_tensor *enable;     /* i32 scalar input */
    cf_tensor *param_sq;   /* f32 [n_params]: sum of squares of each parameter's gradient */
} cf_grad_stats_tensors;
cf_grad_stats_tensors cf_graph_grad_stats(const cf_tensor *grad_norm);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
