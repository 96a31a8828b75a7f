/* Internal: the communicators behind cf_dist and its groups, shared by the process
 * group (dist.c) and the gradient synchronisation (grad_sync.c, allreduce.c). */
#ifndef CFORMERS_DIST_INTERNAL_H
#define CFORMERS_DIST_INTERNAL_H

#include <mpi.h>

#include "cformers/dist.h"

/* One group of ranks with its own topology: the nodes its members share, so the
 * hierarchical all-reduce of a data group reduces inside a node of that group. In a
 * world of one every communicator is MPI_COMM_NULL and the collectives return at once. */
struct cf_dist_group {
    const char *name;
    int rank, size;       /* in the group */
    int *world_ranks;     /* [size]: the world rank of each member, by group rank */
    int node, nodes;      /* node index (by first rank), nodes the group spans */
    int local_rank, local_size;
    bool uniform;         /* every node has local_size of the group's ranks */
    MPI_Comm comm;        /* the group's ranks, returning errors */
    MPI_Comm node_comm;   /* the group's ranks on this node */
    MPI_Comm leader_comm; /* local rank 0 of every node of the group; MPI_COMM_NULL on the others */
    bool owned;           /* the communicators are this group's; else the world's (a group of every rank) */
};

#define CF_DIST_GROUP_KINDS ((int)CF_GROUP_PIPELINE + 1)

struct cf_dist {
    bool mpi;                                    /* this process called MPI_Init_thread (and will finalize) */
    int64_t layout[3];                           /* data x tensor x pipeline ranks */
    cf_dist_group groups[CF_DIST_GROUP_KINDS];   /* by cf_dist_group_kind; [CF_GROUP_WORLD] owns the world's */
};

/* "MPI_Allreduce: <MPI's error string>" into err; returns -1 (or 0 when rc is MPI_SUCCESS). */
int cf_dist_check(int rc, const char *call, cf_error *err);

#endif
