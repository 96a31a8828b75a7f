/* The op registry: what a graph node can compute.
 *
 * An op is described by a cf_op_def: a shape/dtype rule, a forward kernel per backend
 * (its `kernels` column; CPU today), an optional backward rule that appends the gradient
 * nodes to the graph, and an optional workspace size. The built-in ops (graph.h) are registered this way too, and users add their own
 * with cf_op_register() and put them in a graph with cf_graph_node_add():
 *
 *     static int sq_infer(cf_node *n, cf_error *err) {
 *         cf_node_output_like(n, 0, n->inputs[0]);
 *         return 0;
 *     }
 *     static void sq_forward(const cf_node *n) { ... y[i] = x[i] * x[i] ... }
 *     static void sq_backward(cf_graph *g, const cf_node *n, cf_tensor *const *dy, cf_tensor **dx) {
 *         dx[0] = cf_mul(g, dy[0], cf_scale(g, n->inputs[0], 2.0f));
 *     }
 *     static const cf_op_def square = {.name = "square", .n_outputs = 1, .infer = sq_infer,
 *                                       .kernels[CF_BACKEND_CPU] = sq_forward, .backward = sq_backward};
 *     cf_op_register(&square, &err);
 *
 * Kernels run on the caller's thread and may split work over the pool (threads.h).
 * They must not allocate: scratch memory comes from the workspace the op asks for. A
 * kernel that meets bad data (a token id past the vocabulary) calls cf_kernel_fail and
 * returns without reading or writing out of bounds; cf_plan_run then stops the step and
 * returns the message, naming the op and node. */
#ifndef CFORMERS_OP_H
#define CFORMERS_OP_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"
#include "cformers/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CF_MAX_INPUTS 8
#define CF_MAX_OUTPUTS 4
#define CF_MAX_ATTRS 8

typedef struct cf_graph cf_graph;
typedef struct cf_op_def cf_op_def;
typedef struct cf_node cf_node;

/* Where a plan's kernels run and its memory lives. A graph is backend-neutral; the plan
 * picks the backend and each op's kernel from the op's `kernels` column for it (see
 * docs/graph.md, "A second backend"). */
typedef enum cf_backend {
    CF_BACKEND_CPU = 0,
    CF_BACKEND_COUNT,
} cf_backend;

/* A forward kernel: computes node's outputs from its inputs. */
typedef void (*cf_kernel_fn)(const cf_node *node);

/* Which part of a training step a node belongs to. */
typedef enum cf_phase {
    CF_PHASE_FORWARD = 1,
    CF_PHASE_BACKWARD = 2,
    CF_PHASE_UPDATE = 4,
    CF_PHASE_ALL = 7,
} cf_phase;

/* Op parameters that are not tensors: integers, reals and one pointer to data that
 * outlives the graph (or belongs to it). Their meaning is the op's. */
typedef struct cf_attrs {
    int64_t i[CF_MAX_ATTRS];
    double f[CF_MAX_ATTRS];
    const void *p;
} cf_attrs;

struct cf_node {
    const cf_op_def *op;
    int n_inputs, n_outputs;
    cf_tensor *inputs[CF_MAX_INPUTS];
    cf_tensor *outputs[CF_MAX_OUTPUTS];
    cf_attrs attrs;
    int index;       /* position in execution order */
    cf_phase phase;  /* set when the node is added */
    void *workspace; /* bound at plan time, op->workspace(node) bytes, 64-byte aligned */
    /* Bit k set: output k is a parameter's gradient and the kernel must ADD into it
     * (set by autodiff, only for outputs the op lists in accumulate_outputs). */
    unsigned accumulate;
    /* Bit k set: output k asks to take input k's storage (for outputs the op lists in
     * in_place; set by whoever builds or rewrites the graph, e.g. a fusion pass). The
     * planner grants it only when that is safe, see cf_op_def.in_place. */
    unsigned in_place;
    /* The node rewrites a copy of the weights (the precision pass's low-precision casts):
     * cf_plan_run(..., | CF_RUN_WEIGHTS_CURRENT) skips it, for the micro-batches of a step
     * after its first, when the weights have not moved since it ran. */
    bool weights_copy;
};

struct cf_op_def {
    const char *name;
    /* Outputs the op creates (at most CF_MAX_OUTPUTS). Output 0 is the result builder
     * functions return; further outputs usually hold statistics saved for the backward. */
    int n_outputs;
    /* Sets dtype and shape of every output from the inputs and attrs (use the
     * cf_node_output* helpers); returns -1 with err set when the inputs do not fit. */
    int (*infer)(cf_node *node, cf_error *err);
    /* Per backend (cf_backend), the kernel that computes the outputs (and, for ops that
     * update state, the inputs named by `mutates`) from the inputs. The CPU kernel is
     * required; a plan on another backend refuses a graph with an op lacking its kernel. */
    cf_kernel_fn kernels[CF_BACKEND_COUNT];
    /* Appends nodes to g that compute the gradients of the inputs. dy[k] is the gradient
     * of output k, NULL when none reaches it. Set dx[i] for each input i that has
     * requires_grad (leaving NULL means a zero gradient); its shape must equal input i's.
     * NULL for ops that are not differentiable. Errors are recorded in g. */
    void (*backward)(cf_graph *g, const cf_node *node, cf_tensor *const *dy, cf_tensor **dx);
    /* Scratch bytes the forward kernel needs (NULL: none). Called at plan time, when
     * cf_num_threads() is the pool size the plan will run with. */
    size_t (*workspace)(const cf_node *node);
    /* Bit i set: the kernel writes input i in place (optimizer state, gradient blocks).
     * Only inputs outside the arena (parameters, gradients, optimizer state) may be. */
    unsigned mutates;
    /* Bit k set: the kernel honours node->accumulate for output k. Autodiff then lets a
     * weight gradient computed by this op land directly in the gradient block instead
     * of in a temporary that a separate pass adds there. */
    unsigned accumulate_outputs;
    /* Bit k set: the kernel is correct when output k and input k are the same memory
     * (same dtype and size), so output k may be computed in place. The planner gives
     * output k input k's storage when the node asks (cf_node.in_place) and input k is an
     * arena intermediate (not a graph input, parameter, constant or kept output) that no
     * other input of the node shares and that no later node, forward or backward,
     * reads; otherwise output k gets storage of its own. Either way the results are the
     * same; in place only saves memory. */
    unsigned in_place;
};

/* Adds an op to the process-wide registry. The definition must stay valid for the life
 * of the process (a static). Fails when the name is taken or a required field is
 * missing. Thread-safe. */
int cf_op_register(const cf_op_def *def, cf_error *err);

/* The op registered under `name`, or NULL. Built-in ops are always present. */
const cf_op_def *cf_op_find(const char *name);

/* Called by a kernel that meets bad data (printf-style, one line: the offending value
 * and where it is, e.g. "token id 999 at row 17 of tokens is outside the vocabulary of
 * 512"). Safe from any pool thread; the first failure of a run is kept. The kernel then
 * returns (finishing its work on the good data or not), and cf_plan_run returns -1 with
 * "op (node N): message" once the node is done, running no later node. Only valid while
 * cf_plan_run runs a kernel. */
void cf_kernel_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Helpers for infer rules. */
void cf_node_output(cf_node *node, int k, cf_dtype dtype, int ndim, const int64_t *shape);
void cf_node_output_like(cf_node *node, int k, const cf_tensor *like);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
