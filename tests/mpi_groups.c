/* Process groups, run under mpirun (tests/CMakeLists.txt starts it on 4 and 8 ranks, with
 * CFORMERS_RANKS_PER_NODE pretending 2 or 4 ranks a node). What a user relies on:
 *   layouts  every data x model x pipeline layout of the world's size in the table below
 *            (2x2x1, 1x2x2, 4x1x1, 1x1x4 on 4 ranks; 2x2x2, 4x2x1, 8x1x1 on 8; data_parallel
 *            0 taking the ranks left): each group has the ranks and the order of the
 *            table (Megatron's: tensor innermost, pipeline outermost), a sum over a group
 *            adds exactly its ranks' values, the next / previous stage is the pipeline
 *            group's neighbour, the groups' nodes are those of their ranks (the tensor
 *            group stays on a node), and the gradient sync's algorithms (flat,
 *            hierarchical, 1-bit, ZeRO-1's reduce-scatter and all-gather) sum over the
 *            data group only. A layout that is not the world's size is an error naming
 *            the keys and the numbers, and leaves the groups as they were.
 *   alone    (no mpirun) a world of one: one rank in every group, the same errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cformers/config.h"
#include "cformers/dist.h"
#include "dist/allreduce.h"
#include "test_util.h"

enum { MAX_RANKS = 8 };

/* The groups of each kind as "0,2|1,3": every group's world ranks in group-rank order. */
typedef struct layout {
    int world;
    int64_t data, tensor, pipeline; /* parallel_config's data_parallel, model_parallel, pipeline_stage */
    const char *groups[3];          /* data, tensor, pipeline */
} layout;

static const layout layouts[] = {
    {4, 2, 2, 1, {"0,2|1,3", "0,1|2,3", "0|1|2|3"}},
    {4, 1, 2, 2, {"0|1|2|3", "0,1|2,3", "0,2|1,3"}},
    {4, 4, 1, 1, {"0,1,2,3", "0|1|2|3", "0|1|2|3"}},
    {4, 1, 1, 4, {"0|1|2|3", "0|1|2|3", "0,1,2,3"}},
    {4, 0, 2, 1, {"0,2|1,3", "0,1|2,3", "0|1|2|3"}},
    {8, 2, 2, 2, {"0,2|1,3|4,6|5,7", "0,1|2,3|4,5|6,7", "0,4|1,5|2,6|3,7"}},
    {8, 4, 2, 1, {"0,2,4,6|1,3,5,7", "0,1|2,3|4,5|6,7", "0|1|2|3|4|5|6|7"}},
    {8, 0, 2, 2, {"0,2|1,3|4,6|5,7", "0,1|2,3|4,5|6,7", "0,4|1,5|2,6|3,7"}},
    {8, 8, 1, 1, {"0,1,2,3,4,5,6,7", "0|1|2|3|4|5|6|7", "0|1|2|3|4|5|6|7"}},
};

static const char *const kind_names[] = {"world", "data", "tensor", "pipeline"};

/* The group of `table` that holds world rank `me`: its members into out, their count. */
static int group_from_table(const char *table, int me, int *out) {
    int n = 0;
    bool mine = false;
    for (const char *c = table;;) {
        char *end;
        int r = (int)strtol(c, &end, 10);
        out[n++] = r;
        mine = mine || r == me;
        if (*end == ',') {
            c = end + 1;
            continue;
        }
        if (mine) return n;
        if (!*end) return 0;
        n = 0;
        c = end + 1;
    }
}

static int index_of(const int *members, int n, int r) {
    for (int i = 0; i < n; i++)
        if (members[i] == r) return i;
    return -1;
}

/* The gradient sync's algorithms over the data group: every member sends 2^(world rank)
 * (+ 256 i at element i), so the sum says exactly whose values it added. */
static void check_data_sums(cf_dist *d, const int *members, int n, const char *what) {
    enum { N = 1000 };
    const cf_dist_group *g = cf_dist_group_of(d, CF_GROUP_DATA);
    int me = cf_dist_rank(d), rank = index_of(members, n, me);
    float mask = 0;
    for (int i = 0; i < n; i++) mask += ldexpf(1.0f, members[i]);
    static float buf[N], params[N];
    cf_error err = {{0}};
    static const char *const algos[] = {"flat", "hierarchical", "1-bit"};
    for (int algo = 0; algo < 3; algo++) {
        cf_allreduce a;
        cf_grad_sync_stats st = {0};
        CHECK_MSG(cf_allreduce_init(&a, g, algo == 1, algo == 2, 60.0, N, N, &err) == 0, "%s", err.msg);
        for (int i = 0; i < N; i++) buf[i] = ldexpf(1.0f, me) + (algo == 2 ? 0.0f : 256.0f * (float)i);
        CHECK_MSG(cf_allreduce_bucket(&a, buf, N, 0, algo == 2, &st, &err) == 0, "%s: %s", algos[algo], err.msg);
        int wrong = 0;
        for (int i = 0; i < N; i++) wrong += buf[i] != mask + (algo == 2 ? 0.0f : 256.0f * (float)(i * n));
        CHECK_MSG(wrong == 0, "%s, rank %d: the %s sum over the data group is wrong at %d of %d values (element 0: %g, "
                  "want %g)", what, me, algos[algo], wrong, N, buf[0], mask);
        cf_allreduce_free(&a);
    }
    /* ZeRO-1: the sum lands in this rank's shard only; the all-gather brings every shard. */
    int64_t bounds[MAX_RANKS + 1];
    for (int r = 0; r <= n; r++) bounds[r] = (int64_t)N * r / n;
    cf_allreduce a;
    cf_grad_sync_stats st = {0};
    CHECK(cf_allreduce_init(&a, g, false, false, 60.0, N, N, &err) == 0);
    cf_allreduce_shard(&a, bounds, N);
    for (int i = 0; i < N; i++) buf[i] = ldexpf(1.0f, me) + 256.0f * (float)i;
    CHECK_MSG(cf_allreduce_bucket(&a, buf, N, 0, false, &st, &err) == 0, "reduce-scatter: %s", err.msg);
    int wrong = 0;
    for (int64_t i = bounds[rank]; i < bounds[rank + 1]; i++) wrong += buf[i] != mask + 256.0f * (float)(i * n);
    CHECK_MSG(wrong == 0, "%s, rank %d: ZeRO-1's reduce-scatter over the data group is wrong at %d values", what, me,
              wrong);
    for (int i = 0; i < N; i++) params[i] = i >= bounds[rank] && i < bounds[rank + 1] ? (float)(me * 10000 + i) : -1.0f;
    CHECK_MSG(cf_allreduce_gather(&a, params, &st, &err) == 0, "all-gather: %s", err.msg);
    wrong = 0;
    for (int q = 0; q < n; q++)
        for (int64_t i = bounds[q]; i < bounds[q + 1]; i++) wrong += params[i] != (float)(members[q] * 10000 + i);
    CHECK_MSG(wrong == 0, "%s, rank %d: ZeRO-1's all-gather over the data group is wrong at %d values", what, me, wrong);
    cf_allreduce_free(&a);
}

/* The group's nodes as CFORMERS_RANKS_PER_NODE=k makes them: world rank w is on node w / k. */
static void check_nodes(const cf_dist_group *g, const int *members, int n, int me, int k, const char *what) {
    int nodes = 0, local = 0;
    for (int i = 0; i < n; i++) {
        bool first = true;
        for (int j = 0; j < i; j++) first = first && members[j] / k != members[i] / k;
        nodes += first;
        local += members[i] / k == me / k;
    }
    CHECK_MSG(cf_dist_group_nodes(g) == nodes && cf_dist_group_local_size(g) == local,
              "%s, rank %d: the %s group spans %d nodes with %d ranks on this one, want %d and %d", what, me,
              cf_dist_group_name(g), cf_dist_group_nodes(g), cf_dist_group_local_size(g), nodes, local);
}

static void check_layout(cf_dist *d, const layout *l, int k) {
    int me = cf_dist_rank(d), world = cf_dist_size(d);
    char what[64];
    snprintf(what, sizeof what, "%lldx%lldx%lld", (long long)l->data, (long long)l->tensor, (long long)l->pipeline);
    cf_parallel_config pc = {.data_parallel = l->data, .model_parallel = l->tensor, .pipeline_stage = l->pipeline};
    cf_error err = {{0}};
    CHECK_MSG(cf_dist_set_layout(d, &pc, &err) == 0, "%s: %s", what, err.msg);
    int members[3][MAX_RANKS], sizes[3];
    for (int kind = CF_GROUP_DATA; kind <= CF_GROUP_PIPELINE; kind++) {
        int *m = members[kind - 1], n = sizes[kind - 1] = group_from_table(l->groups[kind - 1], me, m);
        const cf_dist_group *g = cf_dist_group_of(d, (cf_dist_group_kind)kind);
        CHECK(strcmp(cf_dist_group_name(g), kind_names[kind]) == 0);
        CHECK_MSG(cf_dist_group_size(g) == n && cf_dist_group_rank(g) == index_of(m, n, me),
                  "%s, rank %d: %s group rank %d of %d, want %d of %d", what, me, kind_names[kind], cf_dist_group_rank(g),
                  cf_dist_group_size(g), index_of(m, n, me), n);
        for (int i = 0; i < n && i < cf_dist_group_size(g); i++)
            CHECK_MSG(cf_dist_group_world_rank(g, i) == m[i], "%s, rank %d: %s group member %d is world rank %d, want %d",
                      what, me, kind_names[kind], i, cf_dist_group_world_rank(g, i), m[i]);
        /* Each rank adds (its world rank + 1) at its world rank: the sum holds exactly the group's. */
        double v[MAX_RANKS] = {0};
        v[me] = me + 1;
        CHECK_MSG(cf_dist_group_sum_f64(g, v, world, &err) == 0, "%s", err.msg);
        for (int w = 0; w < world; w++)
            CHECK_MSG(v[w] == (index_of(m, n, w) >= 0 ? w + 1 : 0), "%s, rank %d: the %s group's sum has %g from world "
                      "rank %d", what, me, kind_names[kind], v[w], w);
        double top = me;
        CHECK(cf_dist_group_max_f64(g, &top, 1, &err) == 0 && top == m[n - 1]);
        if (k > 0) check_nodes(g, m, n, me, k, what);
    }
    const int *stages = members[CF_GROUP_PIPELINE - 1];
    int p = index_of(stages, sizes[2], me);
    int next = p + 1 < sizes[2] ? stages[p + 1] : -1, prev = p > 0 ? stages[p - 1] : -1;
    CHECK_MSG(cf_dist_pipeline_next(d) == next && cf_dist_pipeline_prev(d) == prev,
              "%s, rank %d: next / previous stage %d / %d, want %d / %d", what, me, cf_dist_pipeline_next(d),
              cf_dist_pipeline_prev(d), next, prev);
    /* Megatron's order puts the tensor group on one node when the node holds it. */
    if (k > 0 && k % l->tensor == 0) CHECK(cf_dist_group_nodes(cf_dist_group_of(d, CF_GROUP_TENSOR)) == 1);
    CHECK(cf_dist_group_size(cf_dist_group_of(d, CF_GROUP_WORLD)) == world && cf_dist_rank(d) == me);
    check_data_sums(d, members[CF_GROUP_DATA - 1], sizes[0], what);
}

/* Layouts that are not the world's size: an error naming the keys and the numbers, and
 * the groups of the layout before it stay. */
static void check_mismatch(cf_dist *d) {
    int world = cf_dist_size(d);
    const char *procs = world == 1 ? "process" : "processes";
    int data_before = cf_dist_group_size(cf_dist_group_of(d, CF_GROUP_DATA));
    struct {
        cf_parallel_config pc;
        char want[200];
    } bad[4] = {{.pc = {.data_parallel = 3, .model_parallel = 2, .pipeline_stage = 1}},
                {.pc = {.data_parallel = 0, .model_parallel = 3, .pipeline_stage = 1}},
                {.pc = {.data_parallel = world + 1, .model_parallel = 1, .pipeline_stage = 1}},
                {.pc = {.data_parallel = 1, .model_parallel = 1 << 20, .pipeline_stage = 1 << 20}}};
    snprintf(bad[0].want, sizeof bad[0].want,
             "parallel_config.data_parallel x model_parallel x pipeline_stage = 3 x 2 x 1 is not the job's %d %s", world,
             procs);
    snprintf(bad[1].want, sizeof bad[1].want,
             "parallel_config.model_parallel x pipeline_stage = 3 x 1 does not divide the job's %d %s", world, procs);
    snprintf(bad[2].want, sizeof bad[2].want, "parallel_config.data_parallel is %d but the job has %d %s", world + 1,
             world, procs);
    snprintf(bad[3].want, sizeof bad[3].want,
             "parallel_config.data_parallel x model_parallel x pipeline_stage = 1 x 1048576 x 1048576 is not the job's");
    for (int i = 0; i < 4; i++) {
        cf_error err = {{0}};
        CHECK_MSG(cf_dist_set_layout(d, &bad[i].pc, &err) != 0, "layout %d was accepted on %d ranks", i, world);
        CHECK_CONTAINS(err.msg, bad[i].want);
        CHECK(cf_dist_group_size(cf_dist_group_of(d, CF_GROUP_DATA)) == data_before);
    }
}

/* A world of one (and a NULL cf_dist, which stands for it). */
static void check_alone(cf_dist *d) {
    cf_error err = {{0}};
    CHECK(cf_dist_size(d) == 1);
    cf_parallel_config pc = {.data_parallel = 0, .model_parallel = 1, .pipeline_stage = 1};
    CHECK_MSG(cf_dist_set_layout(d, &pc, &err) == 0, "%s", err.msg);
    for (int kind = CF_GROUP_WORLD; kind <= CF_GROUP_PIPELINE; kind++) {
        const cf_dist_group *g = cf_dist_group_of(d, (cf_dist_group_kind)kind);
        double v = 2.5;
        CHECK(cf_dist_group_size(g) == 1 && cf_dist_group_rank(g) == 0 && cf_dist_group_world_rank(g, 0) == 0);
        CHECK(cf_dist_group_sum_f64(g, &v, 1, &err) == 0 && v == 2.5);
        CHECK(strcmp(cf_dist_group_name(g), kind_names[kind]) == 0);
    }
    CHECK(cf_dist_pipeline_next(d) == -1 && cf_dist_pipeline_prev(d) == -1);
    CHECK(cf_dist_group_of(NULL, CF_GROUP_DATA) == NULL && cf_dist_group_size(NULL) == 1);
    CHECK(cf_dist_pipeline_next(NULL) == -1 && cf_dist_set_layout(NULL, &pc, &err) == 0);
    pc.data_parallel = 2;
    CHECK(cf_dist_set_layout(NULL, &pc, &err) != 0);
    CHECK_CONTAINS(err.msg, "parallel_config.data_parallel is 2 but the job has 1 process");
    check_mismatch(d);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "layouts";
    cf_error err = {{0}};
    cf_dist *d = cf_dist_open(&err);
    CHECK_MSG(d != NULL, "cf_dist_open: %s", err.msg);
    if (!d) return test_finish();
    const char *env = getenv("CFORMERS_RANKS_PER_NODE");
    int k = env ? atoi(env) : 0, world = cf_dist_size(d), checked = 0;
    if (strcmp(mode, "alone") == 0) {
        check_alone(d);
        checked = 1;
    } else if (strcmp(mode, "layouts") == 0) {
        CHECK_MSG(world <= MAX_RANKS, "run with at most %d ranks", MAX_RANKS);
        for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
            if (layouts[i].world == world) {
                check_layout(d, &layouts[i], k);
                checked++;
            }
        check_mismatch(d);
        CHECK_MSG(checked > 0, "no layout of %d ranks in the table", world);
    } else
        CHECK_MSG(false, "unknown mode %s (layouts, alone)", mode);
    if (cf_dist_rank(d) == 0) printf("%d layouts checked on %d ranks (%d a node)\n", checked, world, k);
    /* Every rank's verdict: a failure on any rank fails the job. */
    double failures = test_failures;
    cf_dist_sum_f64(d, &failures, 1, &err);
    test_failures = (int)failures;
    cf_dist_close(d);
    return test_finish();
}
