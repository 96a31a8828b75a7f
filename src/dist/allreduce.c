/* The all-reduce algorithms, run on the communication thread: MPI's own, hierarchical,
 * and 1-bit compression with error feedback. Each waits by polling MPI_Testall with
 * short sleeps, which progresses the non-blocking operation without spinning a core
 * that backward needs, and gives up after the timeout instead of hanging. */
#include "dist/allreduce.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "obs/clock.h"

static int wait_all(cf_allreduce *a, MPI_Request *reqs, int n, const char *call, cf_error *err) {
    double start = cf_clock_seconds();
    for (int polls = 0;; polls++) {
        int done = 0;
        int rc = MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return cf_dist_check(rc, call, err);
        if (done) return 0;
        if (polls < 64) {
            sched_yield();
            continue;
        }
        /* 20 us, doubling to 320 us: each wake-up takes the core from backward */
        int shift = polls - 64 < 4 ? polls - 64 : 4;
        nanosleep(&(struct timespec){.tv_nsec = 20000L << shift}, NULL);
        if (cf_clock_seconds() - start > a->timeout)
            return cf_fail(err, "%s did not complete in %.0f s (parallel_config.comm_timeout): a rank has died or "
                                "stopped", call, a->timeout);
    }
}

static MPI_Comm exchange_comm(const cf_allreduce *a) { return a->hierarchical ? a->g->leader_comm : a->g->comm; }

int cf_allreduce_init(cf_allreduce *a, const cf_dist_group *g, bool hierarchical, bool onebit, double timeout,
                      int64_t elems, int64_t max_bucket, cf_error *err) {
    memset(a, 0, sizeof *a);
    a->g = g;
    a->hierarchical = hierarchical;
    a->onebit = onebit;
    a->timeout = timeout;
    if (max_bucket > INT_MAX / 4) return cf_fail(err, "a gradient bucket of %lld values exceeds MPI's counts", (long long)max_bucket);
    if (!onebit) return 0;
    a->onebit_kernels = cf_onebit_kernels_for_cpu();
    int64_t chunks = (max_bucket + CF_ONEBIT_CHUNK - 1) / CF_ONEBIT_CHUNK;
    size_t bytes = (size_t)chunks * CF_ONEBIT_CHUNK_BYTES;
    a->residual = cf_xcalloc((size_t)elems, sizeof(float));
    a->server_residual = cf_xcalloc((size_t)elems, sizeof(float));
    a->send = cf_xmalloc(bytes);
    a->gather = cf_xmalloc(bytes);
    /* The reducer of a share receives every rank's copy of it: at most ranks x share. */
    a->recv = cf_xmalloc(bytes + (size_t)g->size * CF_ONEBIT_CHUNK_BYTES);
    a->counts = cf_xmalloc(sizeof(int) * 4 * (size_t)g->size);
    return 0;
}

void cf_allreduce_shard(cf_allreduce *a, int64_t *bounds, int64_t max_bucket) {
    a->bounds = bounds;
    int64_t part = 0;
    for (int r = 0; r < a->g->size; r++)
        if (bounds[r + 1] - bounds[r] > part) part = bounds[r + 1] - bounds[r];
    a->scratch = cf_xmalloc(sizeof(float) * (size_t)(part < max_bucket ? part : max_bucket) + 64);
    a->counts = a->counts ? a->counts : cf_xmalloc(sizeof(int) * 4 * (size_t)a->g->size);
}

void cf_allreduce_free(cf_allreduce *a) {
    free(a->scratch);
    free(a->residual);
    free(a->server_residual);
    free(a->send);
    free(a->recv);
    free(a->gather);
    free(a->counts);
    memset(a, 0, sizeof *a);
}

/* ---- 1-bit compression (the packing kernels are in onebit.c) ---- */

static int64_t chunk_len(int64_t c, int64_t n) {
    int64_t left = n - c * CF_ONEBIT_CHUNK;
    return left < CF_ONEBIT_CHUNK ? left : CF_ONEBIT_CHUNK;
}

/* Rank p reduces chunks [first(p), first(p + 1)) of the bucket. */
static int64_t first_chunk(int p, int ranks, int64_t chunks) { return chunks * p / ranks; }

/* The compressed sum over `comm` (two stages, as 1-bit Adam's): every rank packs its
 * gradient plus its error and sends share p to rank p (all-to-all); rank p unpacks the
 * copies of its share in rank order, sums them, adds its own reducer error, packs the sum
 * again, and every rank gathers and unpacks all the packed sums. All ranks unpack the
 * same bytes, so they end with identical gradients. */
static int onebit_sum(cf_allreduce *a, MPI_Comm comm, float *buf, int64_t n, int64_t offset, cf_grad_sync_stats *st,
                      cf_error *err) {
    int rank, ranks;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    int64_t chunks = (n + CF_ONEBIT_CHUNK - 1) / CF_ONEBIT_CHUNK;
    for (int64_t c = 0; c < chunks; c++)
        a->onebit_kernels.pack(buf + c * CF_ONEBIT_CHUNK, a->residual + offset + c * CF_ONEBIT_CHUNK, chunk_len(c, n),
                       a->send + c * CF_ONEBIT_CHUNK_BYTES);
    int64_t mine0 = first_chunk(rank, ranks, chunks), mine1 = first_chunk(rank + 1, ranks, chunks);
    int *scount = a->counts, *sdispl = scount + ranks, *rcount = sdispl + ranks, *rdispl = rcount + ranks;
    int sent = 0;
    for (int p = 0; p < ranks; p++) {
        int64_t c0 = first_chunk(p, ranks, chunks), c1 = first_chunk(p + 1, ranks, chunks);
        scount[p] = (int)((c1 - c0) * CF_ONEBIT_CHUNK_BYTES);
        sdispl[p] = (int)(c0 * CF_ONEBIT_CHUNK_BYTES);
        rcount[p] = (int)((mine1 - mine0) * CF_ONEBIT_CHUNK_BYTES);
        rdispl[p] = p * rcount[p];
        if (p != rank) sent += scount[p];
    }
    MPI_Request req;
    int rc = MPI_Ialltoallv(a->send, scount, sdispl, MPI_BYTE, a->recv, rcount, rdispl, MPI_BYTE, comm, &req);
    if (cf_dist_check(rc, "MPI_Ialltoallv", err) != 0 || wait_all(a, &req, 1, "MPI_Ialltoallv", err) != 0) return -1;
    for (int64_t c = mine0; c < mine1; c++) {
        float *y = buf + c * CF_ONEBIT_CHUNK;
        int64_t len = chunk_len(c, n);
        for (int q = 0; q < ranks; q++)
            a->onebit_kernels.unpack(a->recv + rdispl[q] + (c - mine0) * CF_ONEBIT_CHUNK_BYTES, len, y, q > 0);
        a->onebit_kernels.pack(y, a->server_residual + offset + c * CF_ONEBIT_CHUNK, len, a->gather + c * CF_ONEBIT_CHUNK_BYTES);
    }
    for (int p = 0; p < ranks; p++) {
        rcount[p] = scount[p];
        rdispl[p] = sdispl[p];
    }
    rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, a->gather, rcount, rdispl, MPI_BYTE, comm, &req);
    if (cf_dist_check(rc, "MPI_Iallgatherv", err) != 0 || wait_all(a, &req, 1, "MPI_Iallgatherv", err) != 0) return -1;
    for (int64_t c = 0; c < chunks; c++)
        a->onebit_kernels.unpack(a->gather + c * CF_ONEBIT_CHUNK_BYTES, chunk_len(c, n), buf + c * CF_ONEBIT_CHUNK, false);
    st->bytes_sent += (double)sent + (double)scount[rank] * (ranks - 1);
    st->raw_bytes += 2.0 * (ranks - 1) / ranks * (double)n * sizeof(float);
    st->compressed_buckets++;
    return 0;
}

/* MPI's own all-reduce, which counts (as a bandwidth-optimal ring would) 2 (p - 1) / p
 * of the buffer sent by each rank. */
static int plain_sum(cf_allreduce *a, MPI_Comm comm, float *buf, int64_t n, cf_grad_sync_stats *st, cf_error *err) {
    int ranks;
    MPI_Comm_size(comm, &ranks);
    if (ranks == 1) return 0;
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, &req);
    if (cf_dist_check(rc, "MPI_Iallreduce", err) != 0 || wait_all(a, &req, 1, "MPI_Iallreduce", err) != 0) return -1;
    double bytes = 2.0 * (ranks - 1) / ranks * (double)n * sizeof(float);
    st->bytes_sent += bytes;
    st->raw_bytes += bytes;
    return 0;
}

static int exchange(cf_allreduce *a, MPI_Comm comm, float *buf, int64_t n, int64_t offset, bool compress,
                    cf_grad_sync_stats *st, cf_error *err) {
    int ranks;
    MPI_Comm_size(comm, &ranks);
    if (compress && ranks > 1) return onebit_sum(a, comm, buf, n, offset, st, err);
    return plain_sum(a, comm, buf, n, st, err);
}

/* Rank r's part of bucket [begin, begin + n): its shard's overlap with the bucket. */
static void shard_part(const cf_allreduce *a, int r, int64_t begin, int64_t n, int64_t *lo, int64_t *hi) {
    *lo = a->bounds[r] > begin ? a->bounds[r] : begin;
    *hi = a->bounds[r + 1] < begin + n ? a->bounds[r + 1] : begin + n;
    if (*hi < *lo) *hi = *lo;
}

/* The bucket's sum lands only in this rank's shard (MPI_Ireduce_scatter into scratch,
 * then copied into place); the rest of the bucket keeps this rank's own gradient, which
 * the wait node clears. (p - 1) / p of the bucket sent per rank: half an all-reduce. */
static int reduce_scatter(cf_allreduce *a, float *buf, int64_t n, int64_t offset, cf_grad_sync_stats *st,
                          cf_error *err) {
    int ranks = a->g->size;
    int *counts = a->counts;
    for (int r = 0; r < ranks; r++) {
        int64_t lo, hi;
        shard_part(a, r, offset, n, &lo, &hi);
        counts[r] = (int)(hi - lo);
    }
    MPI_Request req;
    int rc = MPI_Ireduce_scatter(buf, a->scratch, counts, MPI_FLOAT, MPI_SUM, a->g->comm, &req);
    if (cf_dist_check(rc, "MPI_Ireduce_scatter", err) != 0 || wait_all(a, &req, 1, "MPI_Ireduce_scatter", err) != 0)
        return -1;
    int64_t lo, hi;
    shard_part(a, a->g->rank, offset, n, &lo, &hi);
    memcpy(buf + (lo - offset), a->scratch, sizeof(float) * (size_t)(hi - lo));
    double bytes = (double)(ranks - 1) / ranks * (double)n * sizeof(float);
    st->bytes_sent += bytes;
    st->raw_bytes += bytes;
    return 0;
}

int cf_allreduce_gather(cf_allreduce *a, float *params, cf_grad_sync_stats *st, cf_error *err) {
    int ranks = a->g->size, *counts = a->counts, *displs = counts + ranks;
    for (int r = 0; r < ranks; r++) {
        counts[r] = (int)(a->bounds[r + 1] - a->bounds[r]);
        displs[r] = (int)a->bounds[r];
    }
    int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, params, counts, displs, MPI_FLOAT, a->g->comm);
    if (cf_dist_check(rc, "MPI_Allgatherv", err) != 0) return -1;
    double bytes = (double)counts[a->g->rank] * sizeof(float) * (ranks - 1);
    st->bytes_sent += bytes;
    st->raw_bytes += bytes;
    return 0;
}

int cf_allreduce_bucket(cf_allreduce *a, float *buf, int64_t n, int64_t offset, bool compress, cf_grad_sync_stats *st,
                        cf_error *err) {
    if (a->bounds) return reduce_scatter(a, buf, n, offset, st, err);
    compress = compress && a->onebit;
    if (!a->hierarchical) return exchange(a, a->g->comm, buf, n, offset, compress, st, err);
    /* Inside the node the ranks share memory: the leader (local rank 0) gathers the sum,
     * the leaders exchange among the nodes, and the leader sends the result back. */
    MPI_Comm node = a->g->node_comm;
    MPI_Request req;
    if (a->g->local_size > 1) {
        bool leader = a->g->local_rank == 0;
        int rc = MPI_Ireduce(leader ? MPI_IN_PLACE : buf, leader ? buf : NULL, (int)n, MPI_FLOAT, MPI_SUM, 0, node, &req);
        if (cf_dist_check(rc, "MPI_Ireduce", err) != 0 || wait_all(a, &req, 1, "MPI_Ireduce", err) != 0) return -1;
    }
    if (exchange_comm(a) != MPI_COMM_NULL && exchange(a, exchange_comm(a), buf, n, offset, compress, st, err) != 0)
        return -1;
    if (a->g->local_size > 1) {
        int rc = MPI_Ibcast(buf, (int)n, MPI_FLOAT, 0, node, &req);
        if (cf_dist_check(rc, "MPI_Ibcast", err) != 0 || wait_all(a, &req, 1, "MPI_Ibcast", err) != 0) return -1;
    }
    return 0;
}

int cf_allreduce_rows(cf_allreduce *a, float *side, int64_t vocab, int64_t dim, uint32_t *touched, int32_t *rows,
                      float *grad, cf_grad_sync_stats *st, cf_error *err) {
    MPI_Comm comm = a->g->comm;
    int ranks = a->g->size, words = (int)((vocab + 31) / 32);
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, touched, words, MPI_UINT32_T, MPI_BOR, comm, &req);
    if (cf_dist_check(rc, "MPI_Iallreduce (embedding rows)", err) != 0 ||
        wait_all(a, &req, 1, "MPI_Iallreduce (embedding rows)", err) != 0)
        return -1;
    int64_t n = 0;
    for (int64_t v = 0; v < vocab; v++)
        if (touched[v >> 5] >> (v & 31) & 1u) rows[n++] = (int32_t)v;
    memset(touched, 0, sizeof(uint32_t) * (size_t)words);
    /* Pack in place: row u moves up from rows[u] >= u, never over a row still to move. */
    size_t row_bytes = sizeof(float) * (size_t)dim;
    for (int64_t u = 0; u < n; u++)
        if (rows[u] != u) memcpy(side + u * dim, side + (int64_t)rows[u] * dim, row_bytes);
    int64_t step = ((int64_t)1 << 28) / dim > 0 ? ((int64_t)1 << 28) / dim : 1; /* rows per MPI call */
    for (int64_t u0 = 0; u0 < n && rc == MPI_SUCCESS; u0 += step) {
        int64_t m = n - u0 < step ? n - u0 : step;
        rc = MPI_Iallreduce(MPI_IN_PLACE, side + u0 * dim, (int)(m * dim), MPI_FLOAT, MPI_SUM, comm, &req);
        if (cf_dist_check(rc, "MPI_Iallreduce (embedding rows)", err) != 0 ||
            wait_all(a, &req, 1, "MPI_Iallreduce (embedding rows)", err) != 0)
            return -1;
    }
    for (int64_t u = 0; u < n; u++) {
        float *dst = grad + (int64_t)rows[u] * dim;
        const float *src = side + u * dim;
        for (int64_t c = 0; c < dim; c++) dst[c] += src[c];
    }
    memset(side, 0, row_bytes * (size_t)n);
    for (int64_t u = 0; u < n; u++)
        if (rows[u] >= n) memset(side + (int64_t)rows[u] * dim, 0, row_bytes);
    double bytes = 2.0 * (ranks - 1) / ranks * ((double)n * (double)row_bytes + (double)words * sizeof(uint32_t));
    st->bytes_sent += bytes;
    st->raw_bytes += bytes;
    st->rows_bytes += bytes;
    return 0;
}
