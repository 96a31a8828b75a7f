/* The process group: joining the MPI job, the topology (ranks per node), the data,
 * tensor and pipeline groups cut from it, and the few blocking collectives the trainer
 * needs between steps. */
#include "dist/dist_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/config.h"
#include "core/checked.h"

static const char *const group_names[CF_DIST_GROUP_KINDS] = {"world", "data", "tensor", "pipeline"};

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

/* A group of this rank alone, without communicators (a world of one). */
static void group_alone(cf_dist_group *g, int kind) {
    *g = (cf_dist_group){.name = group_names[kind], .size = 1, .nodes = 1, .local_size = 1, .uniform = true,
                         .comm = MPI_COMM_NULL, .node_comm = MPI_COMM_NULL, .leader_comm = MPI_COMM_NULL};
    g->world_ranks = cf_xcalloc(1, sizeof *g->world_ranks);
}

static void group_free(cf_dist_group *g) {
    if (g->owned) {
        if (g->leader_comm != MPI_COMM_NULL) MPI_Comm_free(&g->leader_comm);
        if (g->node_comm != MPI_COMM_NULL) MPI_Comm_free(&g->node_comm);
        if (g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
    }
    free(g->world_ranks);
    memset(g, 0, sizeof *g);
}

/* The group's nodes: its ranks that share memory (MPI_Comm_split_type(SHARED)), or with
 * CFORMERS_RANKS_PER_NODE=k those whose world ranks have the same w / k; the node
 * leaders, and the node index and count. Collective over g->comm. */
static int find_topology(cf_dist_group *g, int world_rank, int k, cf_error *err) {
    int rc = k > 0 ? MPI_Comm_split(g->comm, world_rank / k, g->rank, &g->node_comm)
                   : MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &g->node_comm);
    if (cf_dist_check(rc, "MPI_Comm_split_type", err) != 0) return -1;
    MPI_Comm_rank(g->node_comm, &g->local_rank);
    MPI_Comm_size(g->node_comm, &g->local_size);
    rc = MPI_Comm_split(g->comm, g->local_rank == 0 ? 0 : MPI_UNDEFINED, g->rank, &g->leader_comm);
    if (cf_dist_check(rc, "MPI_Comm_split", err) != 0) return -1;
    int ids[2] = {0, 0}; /* node index, node count: known to the leader, sent to its node */
    if (g->leader_comm != MPI_COMM_NULL) {
        MPI_Comm_rank(g->leader_comm, &ids[0]);
        MPI_Comm_size(g->leader_comm, &ids[1]);
    }
    if (cf_dist_check(MPI_Bcast(ids, 2, MPI_INT, 0, g->node_comm), "MPI_Bcast", err) != 0) return -1;
    g->node = ids[0];
    g->nodes = ids[1];
    int sizes[2] = {g->local_size, -g->local_size};
    rc = MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MAX, g->comm);
    if (cf_dist_check(rc, "MPI_Allreduce", err) != 0) return -1;
    g->uniform = sizes[0] == -sizes[1];
    return 0;
}

/* Member i of world rank r's group of `kind` in the layout data D x tensor T (world rank
 * t + T (d + D p) for tensor rank t, data rank d, stage p), and r's own index in it. */
static int member(int kind, int r, int i, int64_t D, int64_t T) {
    int64_t t = r % T, d = r / T % D, p = r / (T * D);
    switch (kind) {
    case CF_GROUP_DATA: return (int)(t + T * (i + D * p));
    case CF_GROUP_TENSOR: return (int)(T * (r / T) + i);
    case CF_GROUP_PIPELINE: return (int)(t + T * (d + D * i));
    default: return i;
    }
}

static int index_in(int kind, int r, int64_t D, int64_t T) {
    switch (kind) {
    case CF_GROUP_DATA: return (int)(r / T % D);
    case CF_GROUP_TENSOR: return (int)(r % T);
    case CF_GROUP_PIPELINE: return (int)(r / (T * D));
    default: return r;
    }
}

/* This rank's group of `kind` for the layout D x T x P. A group of every rank shares the
 * world's communicators (so a run with one group of each kind talks exactly as before);
 * the others are split from the world, keyed by their index in the group. */
static int make_group(cf_dist *d, int kind, const int64_t layout[3], int k, cf_dist_group *g, cf_error *err) {
    const cf_dist_group *w = &d->groups[CF_GROUP_WORLD];
    int r = w->rank;
    if (!d->mpi) {
        group_alone(g, kind);
        return 0;
    }
    *g = (cf_dist_group){.name = group_names[kind], .size = (int)layout[kind - 1], .comm = MPI_COMM_NULL,
                         .node_comm = MPI_COMM_NULL, .leader_comm = MPI_COMM_NULL};
    g->rank = index_in(kind, r, layout[0], layout[1]);
    g->world_ranks = cf_xmalloc(sizeof *g->world_ranks * (size_t)g->size);
    for (int i = 0; i < g->size; i++) g->world_ranks[i] = member(kind, r, i, layout[0], layout[1]);
    if (g->size == w->size) {
        int *ranks = g->world_ranks, rank = g->rank;
        *g = *w;
        g->name = group_names[kind];
        g->world_ranks = ranks;
        g->rank = rank;
        g->owned = false;
        return 0;
    }
    g->owned = true;
    int rc = MPI_Comm_split(w->comm, g->world_ranks[0], g->rank, &g->comm);
    if (cf_dist_check(rc, "MPI_Comm_split", err) != 0) return -1;
    int got = -1;
    MPI_Comm_rank(g->comm, &got);
    CF_ASSERT(got == g->rank);
    return find_topology(g, r, k, err);
}

/* data x tensor x pipeline from parallel_config, checked against the world size. */
static int resolve_layout(int world, const cf_parallel_config *pc, int64_t layout[3], cf_error *err) {
    int64_t D = pc->data_parallel, T = pc->model_parallel, P = pc->pipeline_stage;
    const char *procs = world == 1 ? "process" : "processes";
    if (T < 1 || P < 1 || D < 0)
        return cf_fail(err, "parallel_config: data_parallel %lld, model_parallel %lld, pipeline_stage %lld: each must be "
                            ">= 1 (data_parallel 0 takes the ranks left)", (long long)D, (long long)T, (long long)P);
    size_t tp = 0, all = 0;
    bool fits = cf_mul_size((uint64_t)T, (uint64_t)P, &tp);
    if (D == 0) {
        if (!fits || tp > (size_t)world || world % tp != 0)
            return cf_fail(err, "parallel_config.model_parallel x pipeline_stage = %lld x %lld does not divide the job's "
                                "%d %s (mpirun -n / cformers launch -n)", (long long)T, (long long)P, world, procs);
        D = world / (int64_t)tp;
    } else if (!cf_mul3_size((uint64_t)D, (uint64_t)T, (uint64_t)P, &all) || all != (size_t)world) {
        if (T == 1 && P == 1)
            return cf_fail(err, "parallel_config.data_parallel is %lld but the job has %d %s (mpirun -n / cformers "
                                "launch -n); set it to %d or 0", (long long)D, world, procs, world);
        return cf_fail(err, "parallel_config.data_parallel x model_parallel x pipeline_stage = %lld x %lld x %lld is not "
                            "the job's %d %s (mpirun -n / cformers launch -n); data_parallel 0 takes the ranks left",
                       (long long)D, (long long)T, (long long)P, world, procs);
    }
    layout[0] = D;
    layout[1] = T;
    layout[2] = P;
    return 0;
}

static int build_layout(cf_dist *d, const int64_t layout[3], cf_error *err) {
    if (memcmp(d->layout, layout, sizeof d->layout) == 0) return 0;
    int k = pretend_ranks_per_node(err);
    if (k < 0) return -1;
    cf_dist_group next[CF_DIST_GROUP_KINDS] = {{0}};
    for (int kind = CF_GROUP_DATA; kind < CF_DIST_GROUP_KINDS; kind++)
        if (make_group(d, kind, layout, k, &next[kind], err) != 0) {
            for (int j = CF_GROUP_DATA; j <= kind; j++) group_free(&next[j]);
            return -1;
        }
    for (int kind = CF_GROUP_DATA; kind < CF_DIST_GROUP_KINDS; kind++) {
        group_free(&d->groups[kind]);
        d->groups[kind] = next[kind];
    }
    memcpy(d->layout, layout, sizeof d->layout);
    return 0;
}

int cf_dist_set_layout(cf_dist *d, const cf_parallel_config *pc, cf_error *err) {
    int64_t layout[3];
    if (resolve_layout(cf_dist_size(d), pc, layout, err) != 0) return -1;
    return d ? build_layout(d, layout, err) : 0;
}

cf_dist *cf_dist_open(cf_error *err) {
    cf_dist *d = cf_xcalloc(1, sizeof *d);
    cf_dist_group *w = &d->groups[CF_GROUP_WORLD];
    group_alone(w, CF_GROUP_WORLD);
    if (launched_by_mpi()) {
        int provided = 0;
        if (cf_dist_check(MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread", err) != 0) {
            group_free(w);
            free(d);
            return NULL;
        }
        d->mpi = true;
        if (provided < MPI_THREAD_SERIALIZED) {
            cf_fail(err, "the MPI library gives thread level %d; cformers needs MPI_THREAD_SERIALIZED", provided);
            cf_dist_close(d);
            return NULL;
        }
        w->owned = true;
        MPI_Comm_dup(MPI_COMM_WORLD, &w->comm);
        MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
        MPI_Comm_rank(w->comm, &w->rank);
        MPI_Comm_size(w->comm, &w->size);
        free(w->world_ranks);
        w->world_ranks = cf_xmalloc(sizeof *w->world_ranks * (size_t)w->size);
        for (int r = 0; r < w->size; r++) w->world_ranks[r] = r;
        int k = pretend_ranks_per_node(err);
        if (k < 0 || find_topology(w, w->rank, k, err) != 0) {
            cf_dist_close(d);
            return NULL;
        }
    }
    if (build_layout(d, (const int64_t[3]){w->size, 1, 1}, err) != 0) {
        cf_dist_close(d);
        return NULL;
    }
    return d;
}

void cf_dist_close(cf_dist *d) {
    if (!d) return;
    for (int kind = CF_DIST_GROUP_KINDS - 1; kind >= 0; kind--) group_free(&d->groups[kind]);
    if (d->mpi) MPI_Finalize();
    free(d);
}

void cf_dist_abort(cf_dist *d, int code) {
    if (d && d->mpi && cf_dist_size(d) > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

static const cf_dist_group *world_of(const cf_dist *d) { return d ? &d->groups[CF_GROUP_WORLD] : NULL; }

int cf_dist_rank(const cf_dist *d) { return cf_dist_group_rank(world_of(d)); }
int cf_dist_size(const cf_dist *d) { return cf_dist_group_size(world_of(d)); }
int cf_dist_node(const cf_dist *d) { return d ? d->groups[CF_GROUP_WORLD].node : 0; }
int cf_dist_nodes(const cf_dist *d) { return cf_dist_group_nodes(world_of(d)); }
int cf_dist_local_rank(const cf_dist *d) { return d ? d->groups[CF_GROUP_WORLD].local_rank : 0; }
int cf_dist_local_size(const cf_dist *d) { return cf_dist_group_local_size(world_of(d)); }
bool cf_dist_uniform_nodes(const cf_dist *d) { return cf_dist_group_uniform_nodes(world_of(d)); }

const cf_dist_group *cf_dist_group_of(const cf_dist *d, cf_dist_group_kind kind) {
    CF_ASSERT(kind >= CF_GROUP_WORLD && kind < CF_DIST_GROUP_KINDS);
    return d ? &d->groups[kind] : NULL;
}

const char *cf_dist_group_name(const cf_dist_group *g) { return g ? g->name : "alone"; }
int cf_dist_group_rank(const cf_dist_group *g) { return g ? g->rank : 0; }
int cf_dist_group_size(const cf_dist_group *g) { return g ? g->size : 1; }
int cf_dist_group_nodes(const cf_dist_group *g) { return g ? g->nodes : 1; }
int cf_dist_group_local_size(const cf_dist_group *g) { return g ? g->local_size : 1; }
bool cf_dist_group_uniform_nodes(const cf_dist_group *g) { return g ? g->uniform : true; }

int cf_dist_group_world_rank(const cf_dist_group *g, int i) {
    CF_ASSERT(i >= 0 && i < cf_dist_group_size(g));
    return g ? g->world_ranks[i] : 0;
}

static int stage_neighbour(const cf_dist *d, int step) {
    const cf_dist_group *p = cf_dist_group_of(d, CF_GROUP_PIPELINE);
    int s = cf_dist_group_rank(p) + step;
    return s >= 0 && s < cf_dist_group_size(p) ? cf_dist_group_world_rank(p, s) : -1;
}

int cf_dist_pipeline_next(const cf_dist *d) { return stage_neighbour(d, 1); }
int cf_dist_pipeline_prev(const cf_dist *d) { return stage_neighbour(d, -1); }

static int reduce_f64(const cf_dist_group *g, double *values, int n, MPI_Op op, cf_error *err) {
    if (!g || g->size == 1) return 0;
    return cf_dist_check(MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, op, g->comm), "MPI_Allreduce", err);
}

int cf_dist_group_sum_f64(const cf_dist_group *g, double *values, int n, cf_error *err) {
    return reduce_f64(g, values, n, MPI_SUM, err);
}
int cf_dist_group_max_f64(const cf_dist_group *g, double *values, int n, cf_error *err) {
    return reduce_f64(g, values, n, MPI_MAX, err);
}
int cf_dist_sum_f64(cf_dist *d, double *values, int n, cf_error *err) {
    return reduce_f64(world_of(d), values, n, MPI_SUM, err);
}
int cf_dist_max_f64(cf_dist *d, double *values, int n, cf_error *err) {
    return reduce_f64(world_of(d), values, n, MPI_MAX, err);
}

int cf_dist_bcast(cf_dist *d, void *data, size_t bytes, int root, cf_error *err) {
    if (cf_dist_size(d) == 1) return 0;
    for (size_t done = 0; done < bytes;) { /* MPI counts are int */
        size_t part = bytes - done < (1u << 30) ? bytes - done : (1u << 30);
        int rc = MPI_Bcast((char *)data + done, (int)part, MPI_BYTE, root, d->groups[CF_GROUP_WORLD].comm);
        if (cf_dist_check(rc, "MPI_Bcast", err) != 0) return -1;
        done += part;
    }
    return 0;
}

int cf_dist_barrier(cf_dist *d, cf_error *err) {
    if (cf_dist_size(d) == 1) return 0;
    return cf_dist_check(MPI_Barrier(d->groups[CF_GROUP_WORLD].comm), "MPI_Barrier", err);
}

int cf_dist_check_same(cf_dist *d, uint64_t value, const char *what, cf_error *err) {
    int size = cf_dist_size(d);
    if (size == 1) return 0;
    uint64_t *all = cf_xmalloc(sizeof *all * (size_t)size);
    int rc = cf_dist_check(MPI_Allgather(&value, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, d->groups[CF_GROUP_WORLD].comm),
                           "MPI_Allgather", err);
    for (int r = 1; rc == 0 && r < size; r++)
        if (all[r] != all[0]) rc = cf_fail(err, "rank %d has a different %s than rank 0", r, what);
    free(all);
    return rc;
}
