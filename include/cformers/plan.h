/* Static memory plan and executor.
 *
 * Planning gives every intermediate tensor (activations, their gradients, op
 * workspaces) an offset in ONE arena, from liveness intervals over the execution order:
 * tensors whose lifetimes do not overlap share memory. Offsets are assigned greedily
 * by size, each tensor going into the smallest gap that fits beside the tensors it is
 * live with ("greedy by size", Pisarchyk & Lee 2020). Parameters, gradients and Adam
 * moments live in their own blocks; inputs, constants and kept outputs are never shared.
 *
 * The executor then runs the nodes in order on the engine's thread pool, allocating
 * nothing during a step. */
#ifndef CFORMERS_PLAN_H
#define CFORMERS_PLAN_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"
#include "cformers/graph.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_memory_report {
    size_t arena_bytes;       /* the planned arena */
    size_t lower_bound_bytes; /* peak of bytes live at the same time: no plan can do better */
    double fragmentation;     /* arena / lower bound - 1 */
    size_t param_bytes;       /* parameter block; the gradient block is as big */
    size_t moment_bytes;      /* both Adam moment blocks: 2 x param_bytes, less when sharded (ZeRO-1) */
    size_t frozen_bytes;      /* frozen weights in their dtypes (cf_graph_param_freeze): no gradient, no moments */
    size_t io_bytes;          /* inputs, constants and kept outputs */
    int arena_tensors;        /* tensors (and workspaces) placed in the arena */
} cf_memory_report;

/* Plans the arena without allocating anything: enough to report what a step needs
 * (cformers config show) for models that do not fit this machine. */
int cf_graph_plan_memory(cf_graph *g, cf_memory_report *report, cf_error *err);

/* One block of the activation arena over a step: bytes [offset, offset + bytes) hold
 * `tensor` (and the in-place outputs laid over it), or node `first`'s workspace when
 * tensor is NULL, from node index `first` to node index `last` (execution order). */
typedef struct cf_arena_block {
    int64_t offset, bytes;
    int first, last;
    const cf_tensor *tensor;
} cf_arena_block;

/* The arena's blocks as cf_graph_plan_memory places them (the memory plan's timeline);
 * *n of them, freed by the caller. NULL on error (err set). */
cf_arena_block *cf_graph_arena_blocks(cf_graph *g, int *n, cf_error *err);

/* A graph with memory: plans, allocates the arena and blocks, binds every tensor's data
 * pointer, copies constants, zeroes parameters, gradients and moments. The graph must
 * outlive the plan and must not change after this. */
typedef struct cf_plan cf_plan;
cf_plan *cf_plan_create(cf_graph *g, cf_error *err);
void cf_plan_free(cf_plan *p);

const cf_memory_report *cf_plan_memory(const cf_plan *p);
cf_graph *cf_plan_graph(const cf_plan *p);

/* Initialises every parameter as its cf_init says. Parameter i draws from its own
 * stream (xoshiro256** seeded from seed and i, see rng.h), so results do not depend on
 * thread count or on which other parameters exist before it. A frozen parameter draws
 * from the stream it had when created, in f32, rounded or quantized to its dtype. */
void cf_plan_init_params(cf_plan *p, uint64_t seed);
void cf_plan_zero_grads(cf_plan *p);
/* Writes the f32 values x (cf_tensor_numel(t) of them, row-major) into the bound storage
 * of t, rounded (bf16, f16) or quantized (q8_0, q4_0, by cf_quantize_blocks) to t's dtype:
 * how weights reach a frozen parameter (cf_graph_param_freeze). */
void cf_frozen_store(cf_tensor *t, const float *x);

/* Runs the nodes of the given phases (CF_PHASE_* bits) in order. Forward alone
 * evaluates (validation, gradient checks); FORWARD|BACKWARD accumulates gradients;
 * UPDATE applies the optimizer. Never allocates. Computes with denormal floats as zero
 * (each would cost a ~100-cycle assist; see gemm.h) and leaves the caller's
 * floating-point mode as it was; a node hook runs in the engine's mode.
 * Returns 0, or -1 when a kernel met bad data (cf_kernel_fail: a token id past the
 * vocabulary): err then says "op (node N): what", the nodes after it did not run and
 * the step's results are not to be used. */
int cf_plan_run(cf_plan *p, unsigned phases, cf_error *err);
/* A flag for cf_plan_run's phases: the parameters are unchanged since the last run, so
 * the nodes that copy them (cf_node.weights_copy) are skipped. */
enum { CF_RUN_WEIGHTS_CURRENT = 16 };

/* Several activation arenas, for a schedule that holds several micro-batches' activations
 * at once (a pipeline stage's 1F1B): n arenas in all, each as big as the plan's, arena 0
 * the plan's own. cf_plan_use_arena(p, k) binds every arena tensor and workspace to
 * arena k; a forward and the backward of the same micro-batch run in the same arena, the
 * graph's inputs and kept outputs (outside the arenas) as the forward left them. Once,
 * after cf_plan_create; -1 with err when out of memory. */
int cf_plan_set_arenas(cf_plan *p, int n, cf_error *err);
void cf_plan_use_arena(cf_plan *p, int k);

/* Optional per-node timing hook for profilers: called after each node with its
 * wall-clock seconds. NULL to remove. */
typedef void (*cf_node_hook)(void *ctx, const cf_node *node, double seconds);
void cf_plan_set_hook(cf_plan *p, cf_node_hook hook, void *ctx);

/* Human-readable one-line summary of the plan ("arena 12.3 MiB, lower bound ..."). */
void cf_memory_report_format(const cf_memory_report *r, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
