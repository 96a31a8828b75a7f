/* The MPI job and its process groups: one MPI rank per socket or node, threads inside it.
 *
 * A process started by mpirun / srun / `cformers launch` joins the MPI job when it opens
 * the group (MPI_Init_thread at MPI_THREAD_SERIALIZED: the gradient synchronisation's
 * communication thread and the main thread call MPI, never both at once). A process
 * started on its own is a world of one and never touches MPI, so single-process runs
 * pay nothing for it.
 *
 * Topology: ranks that share a node are found with MPI_Comm_split_type(SHARED), or, for
 * tests and the simulated cluster, CFORMERS_RANKS_PER_NODE=k pretends ranks 0..k-1 are
 * node 0, k..2k-1 node 1, and so on. The hierarchical all-reduce reads it.
 *
 * Errors: every call returns -1 with err set when MPI reports one (the world
 * communicator returns errors instead of aborting). A library never exits the process:
 * after an error the command line calls cf_dist_abort so the other ranks stop at once
 * instead of waiting for this one.
 *
 * Process groups (Megatron-LM's parallel_state): the world of D x T x P ranks is cut into
 * data-parallel groups of D ranks, tensor-parallel groups of T and pipeline groups of P.
 * The tensor group is innermost (T consecutive world ranks, so it stays on a node), the
 * pipeline outermost: world rank = t + T x (d + D x p) for tensor rank t, data rank d and
 * pipeline stage p (docs/distributed.md has the table). Until cf_dist_set_layout the
 * layout is D = world, T = P = 1. */
#ifndef CFORMERS_DIST_H
#define CFORMERS_DIST_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cformers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cf_dist cf_dist;
struct cf_parallel_config;
/* One group this rank belongs to; owned by its cf_dist, valid until the next
 * cf_dist_set_layout or cf_dist_close. NULL stands for a group of this rank alone. */
typedef struct cf_dist_group cf_dist_group;

typedef enum cf_dist_group_kind {
    CF_GROUP_WORLD,    /* every rank */
    CF_GROUP_DATA,     /* same tensor rank and stage: the gradient sync's ranks */
    CF_GROUP_TENSOR,   /* same data rank and stage: consecutive world ranks */
    CF_GROUP_PIPELINE, /* same tensor and data rank: one rank per stage */
} cf_dist_group_kind;

/* Joins the MPI job when the environment says this process is one of its ranks
 * (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE), else returns a world of one. */
cf_dist *cf_dist_open(cf_error *err);
/* Leaves the job (MPI_Finalize after a barrier); NULL is allowed. */
void cf_dist_close(cf_dist *d);
/* Ends every rank of the job with `code` (MPI_Abort); on a world of one, returns. */
void cf_dist_abort(cf_dist *d, int code);

int cf_dist_rank(const cf_dist *d);       /* 0 for NULL */
int cf_dist_size(const cf_dist *d);       /* 1 for NULL */
int cf_dist_node(const cf_dist *d);       /* this rank's node, 0 .. nodes-1 */
int cf_dist_nodes(const cf_dist *d);      /* nodes in the job */
int cf_dist_local_rank(const cf_dist *d); /* rank among the ranks of this node */
int cf_dist_local_size(const cf_dist *d); /* ranks on this node */
/* Whether every node holds the same number of ranks (the hierarchical all-reduce's
 * bytes formula and the automatic choice assume it). */
bool cf_dist_uniform_nodes(const cf_dist *d);

/* Cuts the world into the groups of parallel_config: data_parallel x model_parallel x
 * pipeline_stage ranks, data_parallel 0 taking world / (model_parallel x pipeline_stage).
 * A product other than the world size is an error naming the keys and the numbers (and
 * nothing changes). Collective over the world: every rank calls it with the same values.
 * Replaces the groups made before; the same layout again keeps them. */
int cf_dist_set_layout(cf_dist *d, const struct cf_parallel_config *pc, cf_error *err);
/* This rank's group of that kind (NULL for NULL d). */
const cf_dist_group *cf_dist_group_of(const cf_dist *d, cf_dist_group_kind kind);
const char *cf_dist_group_name(const cf_dist_group *g); /* "world", "data", "tensor", "pipeline" */
int cf_dist_group_rank(const cf_dist_group *g);         /* this rank in the group; 0 for NULL */
int cf_dist_group_size(const cf_dist_group *g);         /* 1 for NULL */
/* The world rank of the group's member i, 0 <= i < size (for NULL: this rank, 0). */
int cf_dist_group_world_rank(const cf_dist_group *g, int i);
/* The nodes the group spans (the topology above, restricted to its ranks), the ranks of
 * this rank's node in it, and whether every node holds as many. */
int cf_dist_group_nodes(const cf_dist_group *g);
int cf_dist_group_local_size(const cf_dist_group *g);
bool cf_dist_group_uniform_nodes(const cf_dist_group *g);
/* The world rank of the next (previous) pipeline stage of this rank's pipeline group,
 * -1 on the last (first) stage. */
int cf_dist_pipeline_next(const cf_dist *d);
int cf_dist_pipeline_prev(const cf_dist *d);

/* Blocking collectives for the main thread, between steps (never while a gradient
 * all-reduce is in flight). */
int cf_dist_sum_f64(cf_dist *d, double *values, int n, cf_error *err);
int cf_dist_max_f64(cf_dist *d, double *values, int n, cf_error *err);
int cf_dist_bcast(cf_dist *d, void *data, size_t bytes, int root, cf_error *err);
int cf_dist_barrier(cf_dist *d, cf_error *err);
/* Whether every rank passed the same value (a config or shape fingerprint): 0 when they
 * agree, -1 with err naming the first rank that differs. */
int cf_dist_check_same(cf_dist *d, uint64_t value, const char *what, cf_error *err);
/* The same sums and maxima over one group's ranks only (NULL: a group of one). */
int cf_dist_group_sum_f64(const cf_dist_group *g, double *values, int n, cf_error *err);
int cf_dist_group_max_f64(const cf_dist_group *g, double *values, int n, cf_error *err);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
