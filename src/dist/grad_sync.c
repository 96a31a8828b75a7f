/* The gradient synchronisation pass, its two ops and the communication thread. */
#include "dist/grad_sync.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/graph_internal.h"
#include "core/graph_rewrite.h"
#include "dist/allreduce.h"
#include "dist/dist_internal.h"
#include "kernels/graph_ops.h"
#include "obs/clock.h"

typedef struct bucket {
    int64_t begin, end; /* elements of the gradient block */
    int trigger;        /* index of the last backward node that writes into it */
} bucket;

/* An embedding whose gradient rows travel sparsely: its lookup's backward accumulates
 * into `side` (a persistent [vocab, dim] table of this rank) instead of the gradient
 * block, and only the rows some rank's tokens hit are summed, at the end of backward.
 * A tied embedding's dense part (the head's product) stays in the buckets, ready at the
 * start of backward. */
typedef struct rows_job {
    cf_node *lookup;     /* the embedding_backward node */
    cf_tensor *side;     /* [vocab, dim] f32, kept between steps, cleared after each exchange */
    int64_t offset;      /* the parameter's place in the gradient block */
    int64_t vocab, dim;
    uint32_t *touched;   /* the rows this rank's tokens hit since the last exchange */
    int32_t *rows;       /* scratch: the union's row ids */
    float *side_data;
} rows_job;

struct cf_grad_sync {
    cf_dist *dist;
    const cf_dist_group *group; /* the data-parallel group: the ranks whose gradients are summed */
    cf_parallel_config pc;
    cf_allreduce algo;
    bucket *buckets;
    int n_buckets;
    rows_job *rows;
    int n_rows;
    int n_jobs; /* buckets, then the rows exchanges: what the thread runs per step */
    float *grads; /* the gradient block, read from the nodes' input when they run */
    int64_t *bounds; /* ZeRO-1: rank r's optimizer shard is [bounds[r], bounds[r + 1]); else NULL */
    double *stats_sq; /* ZeRO-1: the per-parameter gradient statistics being summed over ranks */

    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work, done_cond;
    int *queue; /* bucket indices handed over this step, in order */
    int queued, taken, done;
    bool stop, armed, failed;
    int64_t step;
    cf_error error;
    cf_grad_sync_stats stats;
    cf_grad_sync_span *spans;
};

/* ---- the communication thread ---- */

/* Job b: bucket b, or (from n_buckets on) an embedding's rows. */
static void run_bucket(cf_grad_sync *s, int b) {
    bool compress = s->pc.gradient_compression == CF_COMPRESSION_ONEBIT && s->step >= s->pc.freeze_step;
    double start = cf_clock_seconds();
    cf_error err = {{0}};
    int before = s->stats.compressed_buckets, rc;
    int64_t elems;
    if (b < s->n_buckets) {
        const bucket *k = &s->buckets[b];
        elems = k->end - k->begin;
        rc = cf_allreduce_bucket(&s->algo, s->grads + k->begin, elems, k->begin, compress, &s->stats, &err);
    } else {
        rows_job *j = &s->rows[b - s->n_buckets];
        double sent = s->stats.bytes_sent;
        rc = cf_allreduce_rows(&s->algo, j->side_data, j->vocab, j->dim, j->touched, j->rows, s->grads + j->offset,
                               &s->stats, &err);
        elems = (int64_t)((s->stats.bytes_sent - sent) / sizeof(float));
    }
    double end = cf_clock_seconds();
    s->spans[b] = (cf_grad_sync_span){.start = start, .end = end, .elems = elems,
                                      .compressed = s->stats.compressed_buckets > before};
    s->stats.comm_seconds += end - start;
    if (rc != 0) {
        pthread_mutex_lock(&s->lock);
        if (!s->failed) {
            s->failed = true;
            s->error = err;
            if (b < s->n_buckets)
                cf_fail_prefix(&s->error, "rank %d, step %lld, gradient bucket %d: ", cf_dist_rank(s->dist),
                               (long long)s->step + 1, b);
            else
                cf_fail_prefix(&s->error, "rank %d, step %lld, embedding rows of %s: ", cf_dist_rank(s->dist),
                               (long long)s->step + 1, s->rows[b - s->n_buckets].side->name);
        }
        pthread_mutex_unlock(&s->lock);
    }
}

static void *comm_thread(void *arg) {
    cf_grad_sync *s = arg;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->stop && s->taken == s->queued) pthread_cond_wait(&s->work, &s->lock);
        if (s->stop) break;
        int b = s->queue[s->taken++];
        bool skip = s->failed; /* after an error the rest would only time out too */
        pthread_mutex_unlock(&s->lock);
        if (!skip) run_bucket(s, b);
        pthread_mutex_lock(&s->lock);
        s->stats.last_done = cf_clock_seconds();
        s->done++;
        pthread_cond_broadcast(&s->done_cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* Called from the executor (the main thread): no allocation, a lock and a signal. */
static void hand_over(cf_grad_sync *s, int b) {
    pthread_mutex_lock(&s->lock);
    if (s->queued == 0) s->stats.first_start = cf_clock_seconds();
    s->queue[s->queued++] = b;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
}

/* ---- the ops ---- */

static int infer_nothing(cf_node *n, cf_error *err) { return 0; }

/* grad_sync_start: input the gradient block, attrs.p the sync, attrs.i[0] the bucket. */
static void start_forward(const cf_node *n) {
    cf_grad_sync *s = (cf_grad_sync *)n->attrs.p;
    if (!s->armed || !s->pc.overlap_comm) return;
    s->grads = cf_tensor_f32(n->inputs[0]);
    hand_over(s, (int)n->attrs.i[0]);
}

static const cf_op_def op_grad_sync_start = {.name = "grad_sync_start", .n_outputs = 0, .infer = infer_nothing,
                                             .kernels[CF_BACKEND_CPU] = start_forward, .mutates = 1u};

/* grad_sync_wait: input the gradient block. Without overlap the buckets are handed over
 * here, all at once; either way the update starts when the last one is summed. A failed
 * exchange leaves the gradients a NaN, so the update skips the step (the trainer then
 * reports the error). */
static void wait_forward(const cf_node *n) {
    cf_grad_sync *s = (cf_grad_sync *)n->attrs.p;
    if (!s->armed) return;
    s->grads = cf_tensor_f32(n->inputs[0]);
    if (!s->pc.overlap_comm)
        for (int b = 0; b < s->n_jobs; b++) hand_over(s, b);
    double start = cf_clock_seconds();
    pthread_mutex_lock(&s->lock);
    while (s->done < s->n_jobs) pthread_cond_wait(&s->done_cond, &s->lock);
    s->armed = false;
    bool failed = s->failed;
    pthread_mutex_unlock(&s->lock);
    if (s->bounds && !failed) { /* outside its shard a rank holds only its own gradient */
        int rank = cf_dist_group_rank(s->group);
        int64_t lo = s->bounds[rank], hi = s->bounds[rank + 1];
        int64_t all = cf_tensor_numel(n->inputs[0]);
        memset(s->grads, 0, sizeof(float) * (size_t)lo);
        memset(s->grads + hi, 0, sizeof(float) * (size_t)(all - hi));
    }
    s->stats.wait_seconds = cf_clock_seconds() - start;
    if (failed) s->grads[0] = NAN;
}

static const cf_op_def op_grad_sync_wait = {.name = "grad_sync_wait", .n_outputs = 0, .infer = infer_nothing,
                                            .kernels[CF_BACKEND_CPU] = wait_forward, .mutates = 1u};

/* grad_sync_rows: inputs (side [V, D], ids, the gradient block), attrs.i[0] the rows
 * job. Runs after the lookup's backward in every micro-batch: marks the rows its ids hit,
 * and in the step's last one hands the exchange over. */
static void rows_forward(const cf_node *n) {
    cf_grad_sync *s = (cf_grad_sync *)n->attrs.p;
    rows_job *j = &s->rows[n->attrs.i[0]];
    j->side_data = cf_tensor_f32(n->inputs[0]);
    const int32_t *ids = cf_tensor_i32(n->inputs[1]);
    int64_t count = cf_tensor_numel(n->inputs[1]);
    for (int64_t i = 0; i < count; i++)
        if (ids[i] >= 0 && ids[i] < j->vocab) j->touched[ids[i] >> 5] |= 1u << (ids[i] & 31);
    if (!s->armed || !s->pc.overlap_comm) return;
    s->grads = cf_tensor_f32(n->inputs[2]);
    hand_over(s, s->n_buckets + (int)n->attrs.i[0]);
}

static const cf_op_def op_grad_sync_rows = {.name = "grad_sync_rows", .n_outputs = 0, .infer = infer_nothing,
                                            .kernels[CF_BACKEND_CPU] = rows_forward, .mutates = 1u | 4u};

static void fail_update(cf_grad_sync *s, const char *what, const cf_error *err) {
    s->failed = true;
    s->error = *err;
    cf_fail_prefix(&s->error, "rank %d, step %lld, %s: ", cf_dist_rank(s->dist), (long long)s->step + 1, what);
}

/* grad_sync_norm (ZeRO-1): input the gradient norm of this rank's shard, made the norm
 * of the whole gradient: sqrt of the sum of the data group's squares. */
static void norm_forward(const cf_node *n) {
    cf_grad_sync *s = (cf_grad_sync *)n->attrs.p;
    float *norm = cf_tensor_f32(n->inputs[0]);
    double sq = (double)*norm * *norm;
    cf_error err = {{0}};
    if (!s->failed && cf_dist_group_sum_f64(s->group, &sq, 1, &err) != 0) fail_update(s, "gradient norm", &err);
    *norm = s->failed ? NAN : (float)sqrt(sq);
    cf_grad_stats_tensors stats = cf_graph_grad_stats(n->inputs[0]);
    if (*cf_tensor_i32(stats.enable) && !s->failed) { /* each rank summed its shard's part */
        float *per = cf_tensor_f32(stats.param_sq);
        int64_t count = cf_tensor_numel(stats.param_sq);
        for (int64_t i = 0; i < count; i++) s->stats_sq[i] = per[i];
        if (cf_dist_group_sum_f64(s->group, s->stats_sq, (int)count, &err) != 0)
            fail_update(s, "gradient statistics", &err);
        for (int64_t i = 0; i < count; i++) per[i] = (float)s->stats_sq[i];
    }
}

static const cf_op_def op_grad_sync_norm = {.name = "grad_sync_norm", .n_outputs = 0, .infer = infer_nothing,
                                            .kernels[CF_BACKEND_CPU] = norm_forward, .mutates = 1u};

/* grad_sync_gather (ZeRO-1): input the parameter block; every rank's updated shard is
 * sent to all. Not overlapped: the next forward needs every weight. */
static void gather_forward(const cf_node *n) {
    cf_grad_sync *s = (cf_grad_sync *)n->attrs.p;
    if (s->failed) return;
    double start = cf_clock_seconds();
    cf_error err = {{0}};
    if (cf_allreduce_gather(&s->algo, cf_tensor_f32(n->inputs[0]), &s->stats, &err) != 0)
        fail_update(s, "weights all-gather", &err);
    double seconds = cf_clock_seconds() - start;
    s->stats.comm_seconds += seconds;
    s->stats.wait_seconds += seconds;
}

static const cf_op_def op_grad_sync_gather = {.name = "grad_sync_gather", .n_outputs = 0, .infer = infer_nothing,
                                              .kernels[CF_BACKEND_CPU] = gather_forward, .mutates = 1u};

/* Adds a node of `op` right after the first node of `after` (UPDATE phase), over
 * `input`, or over that node's output when input is NULL. */
static void add_after(cf_grad_sync *s, cf_graph *g, const cf_op_def *after, const cf_op_def *op, cf_tensor *input) {
    int at = -1;
    for (int k = 0; k < g->n_nodes && at < 0; k++)
        if (g->nodes[k]->op == after) at = k;
    CF_ASSERT(at >= 0);
    if (!input) input = g->nodes[at]->outputs[0];
    cf_node *n = cf_graph_node_add(g, op, (cf_tensor *[]){input}, 1, &(cf_attrs){.p = s});
    if (n) cf_graph_move_node(g, n, at + 1);
}

/* ---- the pass ---- */

/* Where tensor t lies in the gradient block, when it is (a view of) a gradient. */
static bool grad_region(const cf_tensor *t, int64_t *begin, int64_t *end) {
    const cf_tensor *root = t->view_of ? t->view_of : t;
    if (root->role != CF_ROLE_GRAD || root->param_offset < 0) return false;
    *begin = root->param_offset + (t != root ? t->view_offset : 0);
    *end = *begin + cf_tensor_numel(t);
    return true;
}

static int64_t span_end(const cf_graph *g, int p) {
    return p + 1 < g->n_params ? g->params[p + 1]->param_offset : g->param_elems;
}

/* ready[p]: the last node before the update that writes parameter p's gradient block (a
 * backward node, or the fused output layer's forward, which adds its weight gradient
 * there), -1 when none does. */
static void find_last_writers(const cf_graph *g, int *ready) {
    for (int p = 0; p < g->n_params; p++) ready[p] = -1;
    for (int k = 0; k < g->n_nodes; k++) {
        const cf_node *n = g->nodes[k];
        if (n->phase == CF_PHASE_UPDATE) continue;
        for (int j = 0; j < n->n_outputs + n->n_inputs; j++) {
            bool output = j < n->n_outputs;
            if (!output && !(n->op->mutates >> (j - n->n_outputs) & 1u)) continue;
            int64_t begin, end;
            if (!grad_region(output ? n->outputs[j] : n->inputs[j - n->n_outputs], &begin, &end)) continue;
            for (int p = 0; p < g->n_params; p++)
                if (g->params[p]->param_offset < end && span_end(g, p) > begin && ready[p] < k) ready[p] = k;
        }
    }
}

/* Every embedding lookup whose backward adds straight into a parameter's gradient block
 * gets a side table of its own to add into, and a rows job that exchanges it. */
static void split_embedding_rows(cf_grad_sync *s, cf_graph *g) {
    s->rows = cf_xcalloc((size_t)(g->n_nodes ? g->n_nodes : 1), sizeof *s->rows);
    for (int k = 0; k < g->n_nodes; k++) {
        cf_node *n = g->nodes[k];
        int64_t begin, end;
        if (n->op != &cf_op_embedding_backward || !(n->accumulate & 1u) || n->outputs[0]->view_of ||
            !grad_region(n->outputs[0], &begin, &end))
            continue;
        cf_tensor *dp = n->outputs[0];
        rows_job *j = &s->rows[s->n_rows++];
        j->lookup = n;
        j->offset = begin;
        j->vocab = dp->shape[0];
        j->dim = dp->shape[1];
        j->side = cf_graph_new_tensor(g, "", CF_ROLE_ACTIVATION, CF_F32, 2, dp->shape);
        cf_tensor_set_name(j->side, "%s.rows", dp->name);
        j->side->keep = true; /* persistent: micro-batches accumulate into it */
        j->side->producer = n;
        dp->producer = NULL;
        n->outputs[0] = j->side;
        j->touched = cf_xcalloc((size_t)(j->vocab + 31) / 32, sizeof *j->touched);
        j->rows = cf_xmalloc(sizeof *j->rows * (size_t)j->vocab);
    }
}

static void free_rows(cf_grad_sync *s) {
    for (int j = 0; j < s->n_rows; j++) {
        free(s->rows[j].touched);
        free(s->rows[j].rows);
    }
    free(s->rows);
}

static int by_trigger(const void *a, const void *b) {
    const bucket *x = a, *y = b;
    if (x->trigger != y->trigger) return x->trigger < y->trigger ? -1 : 1;
    return x->begin > y->begin ? -1 : x->begin < y->begin; /* later in the block first */
}

static bool rows_only(const cf_grad_sync *s, const cf_graph *g, int p, const int *ready) {
    for (int j = 0; j < s->n_rows && ready[p] < 0; j++)
        if (s->rows[j].offset == g->params[p]->param_offset) return true;
    return false;
}

/* Buckets of about `target` elements, walking the parameters from the end of the block
 * (the last layers, whose gradients backward finishes first) to its start. A parameter
 * ready earlier than the bucket being filled starts a new one (a tied embedding, first in
 * the block, whose dense part is ready when backward starts); one whose gradient only
 * travels as rows (an untied embedding) is in no bucket. */
static int make_buckets(cf_grad_sync *s, const cf_graph *g, int64_t target, cf_error *err) {
    int *ready = cf_xmalloc(sizeof *ready * (size_t)g->n_params);
    find_last_writers(g, ready);
    int first_backward = g->n_nodes;
    for (int k = 0; k < g->n_nodes; k++)
        if (g->nodes[k]->phase == CF_PHASE_BACKWARD && k < first_backward) first_backward = k;
    s->buckets = cf_xmalloc(sizeof *s->buckets * (size_t)(g->n_params ? g->n_params : 1));
    int n = 0;
    for (int p = g->n_params - 1; p >= 0;) {
        if (rows_only(s, g, p, ready)) {
            p--;
            continue;
        }
        bucket b = {.end = span_end(g, p), .trigger = first_backward};
        do {
            b.begin = g->params[p]->param_offset;
            if (ready[p] > b.trigger) b.trigger = ready[p];
            p--;
        } while (p >= 0 && !rows_only(s, g, p, ready) && b.end - b.begin < target &&
                 ready[p] >= b.trigger); /* one ready earlier (a tied embedding) does not wait for this bucket */
        s->buckets[n++] = b;
    }
    free(ready);
    if (n > CF_GRAD_SYNC_MAX_BUCKETS)
        return cf_fail(err, "parallel_config.bucket_size_mb=%g makes %d gradient buckets (at most %d)",
                       s->pc.bucket_size_mb, n, CF_GRAD_SYNC_MAX_BUCKETS);
    qsort(s->buckets, (size_t)n, sizeof *s->buckets, by_trigger);
    s->n_buckets = n;
    return 0;
}

/* A start node after each bucket's last writer (inserted from the back, so earlier
 * positions do not move), and the wait node before the first update node. */
static int insert_nodes(cf_grad_sync *s, cf_graph *g, cf_error *err) {
    cf_param_blocks blocks = cf_graph_blocks(g);
    cf_phase saved = g->phase;
    g->phase = CF_PHASE_BACKWARD;
    for (int b = s->n_buckets - 1; b >= 0; b--) {
        cf_attrs attrs = {.p = s, .i = {b}};
        cf_node *n = cf_graph_node_add(g, &op_grad_sync_start, (cf_tensor *[]){blocks.grads}, 1, &attrs);
        if (!n) break;
        cf_graph_move_node(g, n, s->buckets[b].trigger + 1);
    }
    for (int j = 0; j < s->n_rows; j++) {
        rows_job *r = &s->rows[j];
        cf_attrs attrs = {.p = s, .i = {j}};
        cf_node *n = cf_graph_node_add(g, &op_grad_sync_rows, (cf_tensor *[]){r->side, r->lookup->inputs[1], blocks.grads},
                                       3, &attrs);
        if (!n) break;
        cf_graph_move_node(g, n, r->lookup->index + 1);
    }
    int first_update = g->n_nodes;
    for (int k = g->n_nodes - 1; k >= 0; k--)
        if (g->nodes[k]->phase == CF_PHASE_UPDATE) first_update = k;
    g->phase = CF_PHASE_UPDATE;
    cf_node *wait = cf_graph_node_add(g, &op_grad_sync_wait, (cf_tensor *[]){blocks.grads}, 1,
                                      &(cf_attrs){.p = s});
    if (wait && first_update < g->n_nodes - 1) cf_graph_move_node(g, wait, first_update);
    for (int k = 0; k < g->n_nodes && s->algo.onebit; k++)
        if (g->nodes[k]->op == &cf_op_adamw) g->nodes[k]->attrs.i[0] = s->pc.freeze_step > 0 ? s->pc.freeze_step : 1;
    if (s->bounds) {
        add_after(s, g, &cf_op_grad_norm, &op_grad_sync_norm, NULL);
        add_after(s, g, &cf_op_adamw, &op_grad_sync_gather, blocks.params);
    }
    g->phase = saved;
    return cf_graph_error(g, err);
}

/* ZeRO-1: data rank r keeps the optimizer state of an equal, 64-byte aligned part of the
 * block. */
static int shard_optimizer(cf_grad_sync *s, cf_graph *g, int64_t largest, cf_error *err) {
    int ranks = cf_dist_group_size(s->group), rank = cf_dist_group_rank(s->group);
    if (g->param_elems > INT_MAX) return cf_fail(err, "ZeRO-1: %lld parameters exceed MPI's counts", (long long)g->param_elems);
    s->bounds = cf_xmalloc(sizeof *s->bounds * (size_t)(ranks + 1));
    for (int r = 0; r <= ranks; r++) s->bounds[r] = r == ranks ? g->param_elems : (g->param_elems * r / ranks) & ~(int64_t)15;
    if (cf_graph_shard_optimizer(g, s->bounds[rank], s->bounds[rank + 1], err) != 0) return -1;
    s->stats_sq = cf_xcalloc((size_t)(g->n_params > 0 ? g->n_params : 1), sizeof *s->stats_sq);
    cf_allreduce_shard(&s->algo, s->bounds, largest);
    return 0;
}

static bool use_hierarchical(const cf_dist_group *g, cf_tristate mode) {
    if (mode == CF_OFF) return false;
    if (mode == CF_ON) return true;
    return cf_dist_group_nodes(g) > 1 && cf_dist_group_local_size(g) > 1 && cf_dist_group_uniform_nodes(g);
}

cf_grad_sync *cf_grad_sync_create(cf_graph *g, cf_dist *d, const cf_parallel_config *pc, cf_error *err) {
    if (!g->differentiated || g->planned) {
        cf_fail(err, "gradient sync: the graph needs its backward and must not be planned yet");
        return NULL;
    }
    cf_grad_sync *s = cf_xcalloc(1, sizeof *s);
    s->dist = d;
    s->group = cf_dist_group_of(d, CF_GROUP_DATA);
    s->pc = *pc;
    int64_t target = (int64_t)(pc->bucket_size_mb * 1024.0 * 1024.0 / sizeof(float));
    if (target < 1) target = 1;
    split_embedding_rows(s, g);
    if (make_buckets(s, g, target, err) != 0) {
        free_rows(s);
        free(s->buckets);
        free(s);
        return NULL;
    }
    s->n_jobs = s->n_buckets + s->n_rows;
    int64_t largest = 0;
    for (int b = 0; b < s->n_buckets; b++)
        if (s->buckets[b].end - s->buckets[b].begin > largest) largest = s->buckets[b].end - s->buckets[b].begin;
    bool zero = pc->optimizer_shard, hier = !zero && use_hierarchical(s->group, pc->hierarchical_allreduce);
    if (zero && pc->gradient_compression != CF_COMPRESSION_NONE) {
        cf_fail(err, "parallel_config.optimizer_shard with gradient_compression=onebit is not supported: choose one");
        free_rows(s);
        free(s->buckets);
        free(s);
        return NULL;
    }
    if (cf_allreduce_init(&s->algo, s->group, hier, pc->gradient_compression == CF_COMPRESSION_ONEBIT, pc->comm_timeout,
                          g->param_elems, largest, err) != 0 ||
        (zero && shard_optimizer(s, g, largest, err) != 0) || insert_nodes(s, g, err) != 0) {
        cf_allreduce_free(&s->algo);
        free_rows(s);
        free(s->stats_sq);
        free(s->bounds);
        free(s->buckets);
        free(s);
        return NULL;
    }
    s->queue = cf_xcalloc((size_t)s->n_jobs, sizeof *s->queue);
    s->spans = cf_xcalloc((size_t)s->n_jobs, sizeof *s->spans);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done_cond, NULL);
    pthread_create(&s->thread, NULL, comm_thread, s);
    return s;
}

void cf_grad_sync_free(cf_grad_sync *s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done_cond);
    cf_allreduce_free(&s->algo);
    free_rows(s);
    free(s->queue);
    free(s->spans);
    free(s->stats_sq);
    free(s->bounds);
    free(s->buckets);
    free(s);
}

void cf_grad_sync_arm(cf_grad_sync *s, int64_t step) {
    pthread_mutex_lock(&s->lock);
    s->armed = true;
    s->step = step;
    s->queued = s->taken = s->done = 0;
    s->failed = false;
    s->stats = (cf_grad_sync_stats){.buckets = s->n_buckets};
    pthread_mutex_unlock(&s->lock);
}

int cf_grad_sync_status(const cf_grad_sync *s, cf_error *err) {
    if (!s->failed) return 0;
    return cf_fail(err, "%s", s->error.msg);
}

const cf_grad_sync_stats *cf_grad_sync_last(const cf_grad_sync *s) { return &s->stats; }

const cf_grad_sync_span *cf_grad_sync_spans(const cf_grad_sync *s, int *n) {
    *n = s->n_jobs;
    return s->spans;
}

void cf_grad_sync_describe(const cf_grad_sync *s, char *buf, size_t size) {
    const cf_dist_group *d = s->group;
    int len = snprintf(buf, size, "%d ranks, %d gradient buckets of about %.1f MiB, %s", cf_dist_group_size(d),
                       s->n_buckets, s->pc.bucket_size_mb, s->pc.overlap_comm ? "overlapped with backward" : "after backward");
    if (len > 0 && (size_t)len < size && s->algo.hierarchical)
        len += snprintf(buf + len, size - (size_t)len, ", hierarchical over %d nodes x %d", cf_dist_group_nodes(d),
                        cf_dist_group_local_size(d));
    if (len > 0 && (size_t)len < size && s->n_rows)
        len += snprintf(buf + len, size - (size_t)len, ", embedding rows exchanged sparsely");
    if (len > 0 && (size_t)len < size && s->bounds)
        len += snprintf(buf + len, size - (size_t)len, ", optimizer sharded (ZeRO-1)");
    if (len > 0 && (size_t)len < size && s->algo.onebit)
        snprintf(buf + len, size - (size_t)len, ", 1-bit compressed after step %lld", (long long)s->pc.freeze_step);
}

bool cf_grad_sync_sharded(const cf_grad_sync *s) { return s && s->bounds; }

int cf_grad_sync_gather_moments(cf_grad_sync *s, const float *shard_m, const float *shard_v, float **m, float **v,
                                cf_error *err) {
    int ranks = cf_dist_group_size(s->group), rank = cf_dist_group_rank(s->group);
    int *counts = cf_xmalloc(sizeof(int) * 2 * (size_t)ranks), *displs = counts + ranks;
    for (int r = 0; r < ranks; r++) {
        counts[r] = (int)(s->bounds[r + 1] - s->bounds[r]);
        displs[r] = (int)s->bounds[r];
    }
    size_t all = sizeof(float) * (size_t)s->bounds[ranks];
    *m = rank == 0 ? cf_xmalloc(all) : NULL;
    *v = rank == 0 ? cf_xmalloc(all) : NULL;
    MPI_Comm comm = s->group->comm;
    int rc = MPI_Gatherv(shard_m, counts[rank], MPI_FLOAT, *m, counts, displs, MPI_FLOAT, 0, comm);
    if (rc == MPI_SUCCESS) rc = MPI_Gatherv(shard_v, counts[rank], MPI_FLOAT, *v, counts, displs, MPI_FLOAT, 0, comm);
    free(counts);
    if (cf_dist_check(rc, "MPI_Gatherv (optimizer moments)", err) == 0) return 0;
    free(*m);
    free(*v);
    *m = *v = NULL;
    return -1;
}
