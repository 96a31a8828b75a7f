/* Internal: the communicators behind cf_dist, shared by the process group (dist.c) and
 * the gradient synchronisation (grad_sync.c, allreduce.c). */
#ifndef CFORMERS_DIST_INTERNAL_H
#define CFORMERS_DIST_INTERNAL_H

#include <mpi.h>

#include "cformers/dist.h"

struct cf_dist {
    bool mpi;          /* this process called MPI_Init_thread (and will finalize) */
    int rank, size;    /* in the world */
    int node, nodes;   /* node index (by first rank), node count */
    int local_rank, local_size;
    bool uniform;      /* every node has local_size ranks */
    MPI_Comm world;    /* a duplicate of MPI_COMM_WORLD that returns errors */
    MPI_Comm node_comm;   /* the ranks of this node */
    MPI_Comm leader_comm; /* local rank 0 of every node; MPI_COMM_NULL on the others */
};

/* "MPI_Allreduce: <MPI's error string>" into err; returns -1 (or 0 when rc is MPI_SUCCESS). */
int cf_dist_check(int rc, const char *call, cf_error *err);

#endif
