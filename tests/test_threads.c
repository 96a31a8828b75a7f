/* The thread pool runs every task exactly once, gives concurrent tasks distinct thread
 * ids, runs nested calls serially, and its team barrier orders phases. */
#include <stdatomic.h>
#include <unistd.h>

#include "cformers/threads.h"
#include "test_util.h"

enum { N_TASKS = 1000, MAX_THREADS = 64 };

static atomic_int counts[N_TASKS];
static atomic_int busy[MAX_THREADS];
static atomic_int id_clash;

static void count_task(void *ctx, int task, int thread) {
    (void)ctx;
    if (atomic_fetch_add(&busy[thread], 1) != 0) atomic_fetch_add(&id_clash, 1);
    atomic_fetch_add(&counts[task], 1);
    atomic_fetch_sub(&busy[thread], 1);
}

static atomic_int nested_serial;
static void inner_task(void *ctx, int task, int thread) {
    (void)task;
    if (thread == 0 && cf_in_parallel()) atomic_fetch_add((atomic_int *)ctx, 1);
}
static void outer_task(void *ctx, int task, int thread) {
    atomic_int inner;
    atomic_init(&inner, 0);
    cf_parallel_for(8, inner_task, &inner);
    if (atomic_load(&inner) == 8) atomic_fetch_add(&nested_serial, 1);
}

typedef struct {
    int phase1[MAX_THREADS];
    atomic_int bad;
    atomic_int ran;
} team_ctx;

static void team_task(void *ctx, int thread, int n_threads) {
    team_ctx *t = ctx;
    atomic_fetch_add(&t->ran, 1);
    t->phase1[thread] = thread + 1;
    cf_team_barrier();
    for (int i = 0; i < n_threads; i++)
        if (t->phase1[i] != i + 1) atomic_fetch_add(&t->bad, 1);
    cf_team_barrier();
}

/* Back-to-back jobs with different contexts and task counts: a worker waking late for
 * one job must never run a task of it against the next job's context (or vice versa). */
typedef struct {
    int id;
    atomic_int runs;
    atomic_int foreign;
} tagged_ctx;

static void tagged_task(void *ctx, int task, int thread) {
    (void)thread;
    tagged_ctx *c = ctx;
    if (task >= c->id % 5 + 2) atomic_fetch_add(&c->foreign, 1);
    atomic_fetch_add(&c->runs, 1);
}

static int run_tagged_jobs(int n_jobs) {
    int bad = 0;
    for (int i = 0; i < n_jobs; i++) {
        tagged_ctx c = {.id = i};
        int n_tasks = i % 5 + 2;
        cf_parallel_for(n_tasks, tagged_task, &c);
        bad += atomic_load(&c.runs) != n_tasks || atomic_load(&c.foreign) != 0;
    }
    return bad;
}

/* The caller runs every task itself when the workers are slow to wake. */
static void slow_first_task(void *ctx, int task, int thread) {
    (void)thread;
    atomic_fetch_add(&((atomic_int *)ctx)[task], 1);
}

/* A team function without barriers still runs once on each distinct pool thread. */
typedef struct {
    int round;
    atomic_int distinct;
} visit_ctx;
static _Thread_local int visited_round;
static void visit_team(void *ctx, int thread, int n_threads) {
    visit_ctx *v = ctx;
    if (visited_round != v->round) atomic_fetch_add(&v->distinct, 1);
    visited_round = v->round;
}

int main(void) {
    for (int threads = 1; threads <= 4; threads++) {
        cf_set_num_threads(threads);
        CHECK(cf_num_threads() == threads);
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < N_TASKS; i++) atomic_store(&counts[i], 0);
            cf_parallel_for(N_TASKS, count_task, NULL);
            int wrong = 0;
            for (int i = 0; i < N_TASKS; i++) wrong += atomic_load(&counts[i]) != 1;
            CHECK_MSG(wrong == 0, "%d tasks not run exactly once with %d threads", wrong, threads);
        }
        CHECK(atomic_load(&id_clash) == 0);

        atomic_store(&nested_serial, 0);
        cf_parallel_for(16, outer_task, NULL);
        CHECK_MSG(atomic_load(&nested_serial) == 16, "nested parallel_for did not run serially (%d)",
                  atomic_load(&nested_serial));

        for (int rep = 0; rep < 50; rep++) {
            team_ctx t = {0};
            cf_parallel_team(team_task, &t);
            CHECK(atomic_load(&t.ran) == threads);
            CHECK(atomic_load(&t.bad) == 0);
        }

        visit_ctx visits = {.round = threads};
        for (int rep = 0; rep < 20; rep++) cf_parallel_team(visit_team, &visits);
        CHECK_MSG(atomic_load(&visits.distinct) == threads, "barrier-free team jobs reached %d of %d threads",
                  atomic_load(&visits.distinct), threads);

        int bad_jobs = run_tagged_jobs(20000);
        CHECK_MSG(bad_jobs == 0, "%d of 20000 back-to-back jobs ran a task wrongly with %d threads", bad_jobs, threads);

        /* After the workers have gone to sleep, a job still completes every task once. */
        usleep(20000);
        atomic_int hits[3] = {0};
        cf_parallel_for(3, slow_first_task, hits);
        CHECK(atomic_load(&hits[0]) == 1 && atomic_load(&hits[1]) == 1 && atomic_load(&hits[2]) == 1);
    }
    long total = 0, prev_end = 0;
    for (int i = 0; i < 7; i++) {
        long b, e;
        cf_split_range(100, 7, i, &b, &e);
        CHECK(b == prev_end);
        CHECK(e - b == 14 || e - b == 15);
        total += e - b;
        prev_end = e;
    }
    CHECK(total == 100);
    cf_set_num_threads(0);
    return test_finish();
}
