/* The process group: joining the MPI job, the topology (ranks per node), and the few
 * blocking collectives the trainer needs between steps. */
#include "dist/dist_internal.h"

#include <stdio.h>
#include <stdlib.h>

int cf_dist_check(int rc, const char *call, cf_error *err) {
    if (rc == MPI_SUCCESS) return 0;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error %d", rc);
    return cf_fail(err, "%s failed: %s (another rank may have died)", call, text);
}

static bool launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_SIZE");
}

/* CFORMERS_RANKS_PER_NODE: 0 when unset (use the real topology). */
static int pretend_ranks_per_node(cf_error *err) {
    const char *env = getenv("CFORMERS_RANKS_PER_NODE");
    if (!env || !*env) return 0;
    char *end = NULL;
    long k = strtol(env, &end, 10);
    if (*end || k < 1 || k > 1 << 20) return cf_fail(err, "CFORMERS_RANKS_PER_NODE=%s is not a rank count >= 1", env);
    return (int)k;
}

static int find_topology(cf_dist *d, cf_error *err) {
    int k = pretend_ranks_per_node(err);
    if (k < 0) return -1;
    int rc = k > 0 ? MPI_Comm_split(d->world, d->rank / k, d->rank, &d->node_comm)
                   : MPI_Comm_split_type(d->world, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &d->node_comm);
    if (cf_dist_check(rc, "MPI_Comm_split_type", err) != 0) return -1;
    MPI_Comm_rank(d->node_comm, &d->local_rank);
    MPI_Comm_size(d->node_comm, &d->local_size);
    rc = MPI_Comm_split(d->world, d->local_rank == 0 ? 0 : MPI_UNDEFINED, d->rank, &d->leader_comm);
    if (cf_dist_check(rc, "MPI_Comm_split", err) != 0) return -1;
    int ids[2] = {0, 0}; /* node index, node count: known to the leader, sent to its node */
    if (d->leader_comm != MPI_COMM_NULL) {
        MPI_Comm_rank(d->leader_comm, &ids[0]);
        MPI_Comm_size(d->leader_comm, &ids[1]);
    }
    if (cf_dist_check(MPI_Bcast(ids, 2, MPI_INT, 0, d->node_comm), "MPI_Bcast", err) != 0) return -1;
    d->node = ids[0];
    d->nodes = ids[1];
    int sizes[2] = {d->local_size, -d->local_size};
    rc = MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, d->world);
    if (cf_dist_check(rc, "MPI_Allreduce", err) != 0) return -1;
    d->uniform = sizes[0] == -sizes[1];
    return 0;
}

cf_dist *cf_dist_open(cf_error *err) {
    cf_dist *d = cf_xcalloc(1, sizeof *d);
    d->size = d->nodes = d->local_size = 1;
    d->uniform = true;
    d->world = d->node_comm = d->leader_comm = MPI_COMM_NULL;
    if (!launched_by_mpi()) return d;
    int provided = 0;
    if (cf_dist_check(MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread", err) != 0) {
        free(d);
        return NULL;
    }
    d->mpi = true;
    if (provided < MPI_THREAD_SERIALIZED) {
        cf_fail(err, "the MPI library gives thread level %d; cformers needs MPI_THREAD_SERIALIZED", provided);
        cf_dist_close(d);
        return NULL;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &d->world);
    MPI_Comm_set_errhandler(d->world, MPI_ERRORS_RETURN);
    MPI_Comm_rank(d->world, &d->rank);
    MPI_Comm_size(d->world, &d->size);
    if (find_topology(d, err) != 0) {
        cf_dist_close(d);
        return NULL;
    }
    return d;
}

void cf_dist_close(cf_dist *d) {
    if (!d) return;
    if (d->mpi) {
        if (d->leader_comm != MPI_COMM_NULL) MPI_Comm_free(&d->leader_comm);
        if (d->node_comm != MPI_COMM_NULL) MPI_Comm_free(&d->node_comm);
        if (d->world != MPI_COMM_NULL) MPI_Comm_free(&d->world);
        MPI_Finalize();
    }
    free(d);
}

void cf_dist_abort(cf_dist *d, int code) {
    if (d && d->mpi && d->size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

int cf_dist_rank(const cf_dist *d) { return d ? d->rank : 0; }
int cf_dist_size(const cf_dist *d) { return d ? d->size : 1; }
int cf_dist_node(const cf_dist *d) { return d ? d->node : 0; }
int cf_dist_nodes(const cf_dist *d) { return d ? d->nodes : 1; }
int cf_dist_local_rank(const cf_dist *d) { return d ? d->local_rank : 0; }
int cf_dist_local_size(const cf_dist *d) { return d ? d->local_size : 1; }
bool cf_dist_uniform_nodes(const cf_dist *d) { return d ? d->uniform : true; }

static int reduce_f64(cf_dist *d, double *values, int n, MPI_Op op, cf_error *err) {
    if (!d || d->size == 1) return 0;
    return cf_dist_check(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, op, d->world), "MPI_Allreduce", err);
}

int cf_dist_sum_f64(cf_dist *d, double *values, int n, cf_error *err) { return reduce_f64(d, values, n, MPI_SUM, err); }
int cf_dist_max_f64(cf_dist *d, double *values, int n, cf_error *err) { return reduce_f64(d, values, n, MPI_MAX, err); }

int cf_dist_bcast(cf_dist *d, void *data, size_t bytes, int root, cf_error *err) {
    if (!d || d->size == 1) return 0;
    for (size_t done = 0; done < bytes;) { /* MPI counts are int */
        size_t part = bytes - done < (1u << 30) ? bytes - done : (1u << 30);
        if (cf_dist_check(MPI_Bcast((char *)data + done, (int)part, MPI_BYTE, root, d->world), "MPI_Bcast", err) != 0)
            return -1;
        done += part;
    }
    return 0;
}

int cf_dist_barrier(cf_dist *d, cf_error *err) {
    if (!d || d->size == 1) return 0;
    return cf_dist_check(MPI_Barrier(d->world), "MPI_Barrier", err);
}

int cf_dist_check_same(cf_dist *d, uint64_t value, const char *what, cf_error *err) {
    if (!d || d->size == 1) return 0;
    uint64_t *all = cf_xmalloc(sizeof *all * (size_t)d->size);
    int rc = cf_dist_check(MPI_Allgather(&value, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, d->world), "MPI_Allgather", err);
    for (int r = 1; rc == 0 && r < d->size; r++)
        if (all[r] != all[0]) rc = cf_fail(err, "rank %d has a different %s than rank 0", r, what);
    free(all);
    return rc;
}
