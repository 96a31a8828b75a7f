/* The thread pool runs every task exactly once, gives concurrent tasks distinct thread
 * ids, runs nested calls serially, its team barrier orders phases, and several threads
 * of the program may call it at once; tasks run in the caller's floating-point mode.
 * Resizing from inside a task, and a thread the system refuses, are errors the caller
 * gets back (the process goes on, on the threads the pool has). */
#include <immintrin.h>
#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "cformers/threads.h"
#include "core/denormals.h"
#include "core/fault.h"
#include "test_util.h"

enum { N_TASKS = 1000, MAX_THREADS = 64 };

static atomic_int counts[N_TASKS];
static atomic_int busy[MAX_THREADS];
static atomic_int id_clash;

/* ctx: the job's run counts, one per task. */
static void count_task(void *ctx, int task, int thread) {
    atomic_int *runs = ctx;
    if (atomic_fetch_add(&busy[thread], 1) != 0) atomic_fetch_add(&id_clash, 1);
    atomic_fetch_add(&runs[task], 1);
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

/* One counting job of n_tasks (runs: its counts) and one team job; whether every task ran
 * once and every team member once, its barrier holding. */
static bool jobs_run_right(atomic_int *runs, int n_tasks) {
    for (int i = 0; i < n_tasks; i++) atomic_init(&runs[i], 0);
    cf_parallel_for(n_tasks, count_task, runs);
    for (int i = 0; i < n_tasks; i++)
        if (atomic_load(&runs[i]) != 1) return false;
    team_ctx t = {0};
    cf_parallel_team(team_task, &t);
    return atomic_load(&t.ran) == cf_num_threads() && atomic_load(&t.bad) == 0;
}

static void record_fp_mode(void *ctx, int thread, int n_threads) {
    (void)n_threads;
    ((unsigned *)ctx)[thread] = _mm_getcsr();
}

/* Tasks run in the calling thread's floating-point mode (here: rounding towards zero,
 * denormals as zero), and the workers' own mode is back for a caller in the default
 * one. */
static void check_fp_mode(void) {
    enum { ROUND_TOWARD_ZERO = 3 << 13 };
    unsigned modes[MAX_THREADS], own = _mm_getcsr(), special = own | ROUND_TOWARD_ZERO | CF_MXCSR_DAZ | CF_MXCSR_FTZ;
    int n = cf_num_threads();
    _mm_setcsr(special);
    cf_parallel_team(record_fp_mode, modes);
    _mm_setcsr(own);
    for (int t = 0; t < n; t++)
        CHECK_MSG(modes[t] == special, "thread %d of %d ran in %#x, not the caller's %#x", t, n, modes[t], special);
    cf_parallel_team(record_fp_mode, modes);
    for (int t = 0; t < n; t++) CHECK_MSG(modes[t] == own, "thread %d of %d kept %#x after the job", t, n, modes[t]);
}

/* One of several program threads using the pool at the same time: each of its jobs must
 * still run every task once, with distinct thread ids, and every team member once. */
enum { CALLERS = 4, CALLER_TASKS = 200, CALLER_ROUNDS = 30 };

static void *caller_main(void *arg) {
    atomic_int *failures = arg;
    atomic_int mine[CALLER_TASKS];
    for (int round = 0; round < CALLER_ROUNDS; round++)
        if (!jobs_run_right(mine, CALLER_TASKS)) atomic_fetch_add(failures, 1);
    return NULL;
}

static void check_concurrent_callers(int threads) {
    cf_set_num_threads(threads, NULL);
    atomic_int failures;
    atomic_init(&failures, 0);
    pthread_t callers[CALLERS];
    for (int i = 0; i < CALLERS; i++) CHECK(pthread_create(&callers[i], NULL, caller_main, &failures) == 0);
    for (int i = 0; i < CALLERS; i++) pthread_join(callers[i], NULL);
    CHECK_MSG(atomic_load(&failures) == 0, "%d wrong jobs with %d program threads on a pool of %d",
              atomic_load(&failures), CALLERS, threads);
    CHECK(atomic_load(&id_clash) == 0);
}

/* A pool task that resizes the pool would wait for its own job: it gets an error instead
 * of hanging, and the pool is unchanged. */
static void resize_task(void *ctx, int task, int thread) {
    (void)thread;
    cf_error *errs = ctx;
    CHECK(cf_set_num_threads(3, &errs[task]) == -1);
}

static void check_resize_inside_task(void) {
    cf_set_num_threads(2, NULL);
    cf_error errs[2] = {{{0}}, {{0}}};
    cf_parallel_for(2, resize_task, errs);
    for (int i = 0; i < 2; i++) CHECK_CONTAINS(errs[i].msg, "cf_set_num_threads called from inside a pool task");
    CHECK(cf_num_threads() == 2);
}

/* The system refuses the pool's third thread (the fault hook's EAGAIN, as at a thread
 * limit): resizing to 4 fails naming it, and the pool runs every task on the 2 it has. */
static void check_refused_thread(void) {
    cf_set_num_threads(1, NULL);
    cf_fault_arm(CF_FAULT_THREAD, 2, CF_FAULT_ENOSPC);
    cf_error err = {{0}};
    CHECK(cf_set_num_threads(4, &err) == -1);
    CHECK_CONTAINS(err.msg, "cannot start thread 3 of 4 (pthread_create: Resource temporarily unavailable); running on 2");
    CHECK(cf_num_threads() == 2);
    for (int i = 0; i < N_TASKS; i++) atomic_store(&counts[i], 0);
    cf_parallel_for(N_TASKS, count_task, counts);
    int wrong = 0;
    for (int i = 0; i < N_TASKS; i++) wrong += atomic_load(&counts[i]) != 1;
    CHECK(wrong == 0);
    CHECK(cf_set_num_threads(3, &err) == 0 && cf_num_threads() == 3); /* the fault fired once */
}

/* A child forked while the pool runs has none of its workers: its jobs must still run
 * (it starts new ones) rather than wait for threads that are gone. The child reports by
 * its exit status; one that hangs is killed after a while and counts as a failure. */
static void check_fork(void) {
    cf_set_num_threads(3, NULL);
    cf_parallel_for(N_TASKS, count_task, counts); /* the workers are up */
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) _exit(jobs_run_right(counts, N_TASKS) ? 0 : 1);
    int status = 0;
    pid_t done = 0;
    for (int tenth = 0; tenth < 300 && done == 0; tenth++) { /* 30 s */
        done = waitpid(pid, &status, WNOHANG);
        if (done == 0) usleep(100000);
    }
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK_MSG(done == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "a child forked from a running pool could not run its jobs (%s)", done == 0 ? "hung" : "failed");
    CHECK(jobs_run_right(counts, N_TASKS)); /* and the parent's pool still works */
}

/* A task a worker holds for 5 ms, as one that lost its core would: the caller waits for it,
 * and the pool then runs its next parallel-for jobs on the caller alone for a while
 * (threads.c, STRAGGLE_FACTOR). Jobs during and after that window still run every task
 * exactly once with distinct thread ids, and team jobs still run on every thread. */
static void straggling_task(void *ctx, int task, int thread) {
    (void)task;
    if (thread != 0) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    atomic_fetch_add((atomic_int *)ctx, 1);
}

static void check_after_straggler(void) {
    cf_set_num_threads(2, NULL);
    for (int rep = 0; rep < 3; rep++) {
        atomic_int ran = 0;
        cf_parallel_for(64, straggling_task, &ran);
        CHECK(atomic_load(&ran) == 64);
        for (int job = 0; job < 200; job++)
            if (!jobs_run_right(counts, N_TASKS)) {
                CHECK_MSG(false, "job %d after a straggling worker ran wrong", job);
                break;
            }
    }
    CHECK(atomic_load(&id_clash) == 0);
}

int main(void) {
    check_after_straggler();
    check_resize_inside_task();
    check_refused_thread();
    for (int threads = 1; threads <= 4; threads++) {
        cf_set_num_threads(threads, NULL);
        CHECK(cf_num_threads() == threads);
        for (int rep = 0; rep < 20; rep++) {
            for (int i = 0; i < N_TASKS; i++) atomic_store(&counts[i], 0);
            cf_parallel_for(N_TASKS, count_task, counts);
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
        check_fp_mode();
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
    check_concurrent_callers(1);
    check_concurrent_callers(3);
    check_fork();
    cf_set_num_threads(0, NULL);
    return test_finish();
}
