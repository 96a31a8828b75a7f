/* Tensor parallelism's collectives as graph ops (Megatron-LM's tensor_parallel/mappings.py):
 *
 *   cf_tp_copy   before a column-parallel product: identity in forward, the gradient
 *                all-reduced over the tensor group in backward (Megatron's f);
 *   cf_tp_reduce after a row-parallel product: the partial products all-reduced over
 *                the tensor group in forward, identity in backward (Megatron's g).
 *
 * Both run a blocking MPI_Allreduce (sum, f32) on the group's communicator from the
 * thread that runs the plan. The process opens MPI at MPI_THREAD_SERIALIZED, so nothing
 * else may call MPI while a step runs: the trainer runs the data group's gradient sync
 * without overlap (buckets handed over at the wait node, when the backward is done)
 * whenever model_parallel > 1. A group of one (NULL) makes both plain identities.
 *
 * cf_tp_grad_norm adds, after the update's grad_norm node, the node that makes the norm
 * that of the whole model: the split parameters' squares summed over the tensor group,
 * the replicated ones (identical on every tensor rank) counted once. */
#ifndef CFORMERS_DIST_TENSOR_PARALLEL_H
#define CFORMERS_DIST_TENSOR_PARALLEL_H

#include <stdbool.h>
#include <stdint.h>

#include "cformers/dist.h"
#include "cformers/graph.h"

/* x [..] -> the same tensor; backward: dy summed over `group`. */
cf_tensor *cf_tp_copy(cf_graph *g, cf_tensor *x, const cf_dist_group *group);
/* x [..] -> x summed over `group`; backward: dy as it is. */
cf_tensor *cf_tp_reduce(cf_graph *g, cf_tensor *x, const cf_dist_group *group);

/* x [count] summed over `group` in place (f32, blocking; between steps). 0 at once for a
 * group of one. */
int cf_tp_sum_f32(const cf_dist_group *group, float *x, int64_t count, cf_error *err);

/* After cf_graph_adamw*: split[i] says whether parameter i (block order) holds only this
 * rank's slice. The norm (and, on statistics steps, each split parameter's squares)
 * become the whole model's. split is copied. Errors are recorded in g. */
void cf_tp_grad_norm(cf_graph *g, const cf_dist_group *group, const bool *split);

#endif
