/* The data-parallel process group: one MPI rank per socket or node, threads inside it.
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
 * instead of waiting for this one. */
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

/* Blocking collectives for the main thread, between steps (never while a gradient
 * all-reduce is in flight). */
int cf_dist_sum_f64(cf_dist *d, double *values, int n, cf_error *err);
int cf_dist_max_f64(cf_dist *d, double *values, int n, cf_error *err);
int cf_dist_bcast(cf_dist *d, void *data, size_t bytes, int root, cf_error *err);
int cf_dist_barrier(cf_dist *d, cf_error *err);
/* Whether every rank passed the same value (a config or shape fingerprint): 0 when they
 * agree, -1 with err naming the first rank that differs. */
int cf_dist_check_same(cf_dist *d, uint64_t value, const char *what, cf_error *err);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
