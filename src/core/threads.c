/* A small fork-join pool. The caller posts a job and works on it too; tasks are claimed
 * from one 64-bit ticket (job id << 32 | next task) and the caller returns as soon as
 * every TASK has completed, without waiting for idle workers to check in. Workers spin
 * briefly on the ticket for low latency between back-to-back kernels, then sleep.
 *
 * A worker that wakes late may see a later job's fields while holding an old job id:
 * a claim only succeeds while the ticket still carries the id the worker saw, and the
 * caller closes a job's ticket before writing the next job's fields, so a successful
 * claim always pairs with that job's own function and context. */
#include "cformers/threads.h"

#include "cformers/error.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { SPIN_ITERATIONS = 20000, BARRIER_SPINS = 2000 };
#define TICKET_CLOSED UINT32_MAX

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t finished;    /* the caller sleeps on it when a job's last tasks run long */
    pthread_t *workers;
    int n_threads;              /* including the caller */
    uint32_t job_id;            /* caller side: id of the last posted job */
    uint32_t start_job_id;      /* job_id when the workers were started */
    _Atomic uint64_t ticket;    /* job id << 32 | next task (TICKET_CLOSED once finished) */
    _Atomic(cf_task_fn) task_fn;
    _Atomic(cf_team_fn) team_fn;
    _Atomic(void *) ctx;
    atomic_uint n_tasks;
    atomic_uint done;           /* tasks of the current job completed */
    atomic_int sleepers;
    atomic_bool caller_sleeping;
    atomic_int barrier_count;
    atomic_uint barrier_phase;
    atomic_bool shutdown;
    bool started;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
        .finished = PTHREAD_COND_INITIALIZER};

static _Thread_local bool tls_in_pool;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static uint32_t ticket_job(uint64_t ticket) { return (uint32_t)(ticket >> 32); }

/* Claims the next task of job `id` if there is one left. */
static bool claim_task(uint32_t id, uint32_t n_tasks, uint32_t *task) {
    uint64_t cur = atomic_load_explicit(&pool.ticket, memory_order_acquire);
    for (;;) {
        if (ticket_job(cur) != id || (uint32_t)cur >= n_tasks) return false;
        if (atomic_compare_exchange_weak_explicit(&pool.ticket, &cur, cur + 1, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            *task = (uint32_t)cur;
            return true;
        }
    }
}

/* Runs tasks of job `id` until none are left to claim. Team jobs have one task per
 * thread and each thread takes only one, so every thread runs the team function once
 * (with its slot as the thread index), barrier or not. */
static void work_on(uint32_t id, int thread) {
    /* Acquire loads: reading a later job's field orders this after that job's close. */
    cf_task_fn task_fn = atomic_load_explicit(&pool.task_fn, memory_order_acquire);
    cf_team_fn team_fn = atomic_load_explicit(&pool.team_fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&pool.ctx, memory_order_acquire);
    uint32_t n_tasks = atomic_load_explicit(&pool.n_tasks, memory_order_acquire), task;
    tls_in_pool = true;
    while (claim_task(id, n_tasks, &task)) {
        if (team_fn)
            team_fn(ctx, (int)task, pool.n_threads);
        else
            task_fn(ctx, (int)task, thread);
        if (atomic_fetch_add(&pool.done, 1) + 1 == n_tasks && atomic_load(&pool.caller_sleeping)) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.finished);
            pthread_mutex_unlock(&pool.lock);
        }
        if (team_fn) break;
    }
    tls_in_pool = false;
}

static void *worker_main(void *arg) {
    int thread = (int)(long)arg;
    /* The job id at start-up, not at first run: a job may already be posted. */
    uint32_t seen = pool.start_job_id;
    for (;;) {
        uint32_t id;
        int spins = 0;
        while ((id = ticket_job(atomic_load_explicit(&pool.ticket, memory_order_acquire))) == seen &&
               spins < SPIN_ITERATIONS && !atomic_load_explicit(&pool.shutdown, memory_order_relaxed)) {
            _mm_pause();
            spins++;
        }
        if (id == seen) {
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleepers, 1);
            while ((id = ticket_job(atomic_load(&pool.ticket))) == seen && !atomic_load(&pool.shutdown))
                pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleepers, 1);
            pthread_mutex_unlock(&pool.lock);
        }
        if (atomic_load(&pool.shutdown)) return NULL;
        seen = id;
        work_on(id, thread);
    }
}

static int default_threads(void) {
    const char *env = getenv("CFORMERS_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end || n < 1 || n > 1024) {
            fprintf(stderr, "cformers: CFORMERS_THREADS=%s is not a thread count in 1..1024\n", env);
            exit(2);
        }
        return (int)n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void stop_workers(void) {
    if (!pool.started) return;
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.shutdown, true);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 1; i < pool.n_threads; i++) pthread_join(pool.workers[i - 1], NULL);
    free(pool.workers);
    pool.workers = NULL;
    pool.started = false;
    atomic_store(&pool.shutdown, false);
}

static void start_workers(int n) {
    pool.n_threads = n;
    pool.start_job_id = pool.job_id;
    pool.workers = cf_xcalloc((size_t)(n > 1 ? n - 1 : 1), sizeof(pthread_t));
    for (int i = 1; i < n; i++) {
        if (pthread_create(&pool.workers[i - 1], NULL, worker_main, (void *)(long)i) != 0) {
            fprintf(stderr, "cformers: cannot start thread %d of %d\n", i, n);
            abort();
        }
    }
    pool.started = true;
}

static void init_pool(void) {
    atomic_store(&pool.ticket, (uint64_t)TICKET_CLOSED);
    start_workers(default_threads());
    atexit(stop_workers);
}

int cf_num_threads(void) {
    pthread_once(&init_once, init_pool);
    return pool.n_threads;
}

void cf_set_num_threads(int n) {
    pthread_once(&init_once, init_pool);
    if (n < 1) n = default_threads();
    if (n == pool.n_threads) return;
    stop_workers();
    start_workers(n);
}

bool cf_in_parallel(void) { return tls_in_pool; }

/* Spins, then yields: a waiter should not steal the core of a preempted worker for long. */
static void backoff(int *spins, int spin_limit) {
    if (*spins < spin_limit) {
        _mm_pause();
        (*spins)++;
    } else {
        sched_yield();
    }
}

static void dispatch(cf_task_fn task_fn, cf_team_fn team_fn, void *ctx, int n_tasks) {
    uint32_t id = ++pool.job_id;
    atomic_store_explicit(&pool.task_fn, task_fn, memory_order_release);
    atomic_store_explicit(&pool.team_fn, team_fn, memory_order_release);
    atomic_store_explicit(&pool.ctx, ctx, memory_order_release);
    atomic_store_explicit(&pool.n_tasks, (uint32_t)n_tasks, memory_order_release);
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    atomic_store(&pool.ticket, (uint64_t)id << 32); /* seq_cst: pairs with the sleepers count */
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }

    work_on(id, 0);

    for (int spins = 0; atomic_load_explicit(&pool.done, memory_order_acquire) < (uint32_t)n_tasks && spins < SPIN_ITERATIONS; spins++)
        _mm_pause();
    if (atomic_load(&pool.done) < (uint32_t)n_tasks) {
        /* Sleep rather than yield: on a loaded machine the worker needs the core. */
        pthread_mutex_lock(&pool.lock);
        atomic_store(&pool.caller_sleeping, true);
        while (atomic_load(&pool.done) < (uint32_t)n_tasks) pthread_cond_wait(&pool.finished, &pool.lock);
        atomic_store(&pool.caller_sleeping, false);
        pthread_mutex_unlock(&pool.lock);
    }
    atomic_store_explicit(&pool.ticket, ((uint64_t)id << 32) | TICKET_CLOSED, memory_order_seq_cst);
}

void cf_parallel_for(int n_tasks, cf_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (tls_in_pool || n_tasks == 1 || cf_num_threads() == 1) {
        bool outer = tls_in_pool;
        tls_in_pool = true;
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        tls_in_pool = outer;
        return;
    }
    dispatch(fn, NULL, ctx, n_tasks);
}

static _Thread_local bool tls_serial_team;

void cf_parallel_team(cf_team_fn fn, void *ctx) {
    if (tls_in_pool || cf_num_threads() == 1) {
        bool outer = tls_in_pool;
        tls_in_pool = tls_serial_team = true;
        fn(ctx, 0, 1);
        tls_serial_team = false;
        tls_in_pool = outer;
        return;
    }
    dispatch(NULL, fn, ctx, pool.n_threads);
}

void cf_team_barrier(void) {
    if (tls_serial_team || pool.n_threads == 1) return;
    unsigned phase = atomic_load_explicit(&pool.barrier_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool.barrier_count, 1, memory_order_acq_rel) == pool.n_threads - 1) {
        atomic_store_explicit(&pool.barrier_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool.barrier_phase, 1, memory_order_release);
        return;
    }
    int spins = 0;
    while (atomic_load_explicit(&pool.barrier_phase, memory_order_acquire) == phase) backoff(&spins, BARRIER_SPINS);
}

void cf_split_range(long n, int parts, int i, long *begin, long *end) {
    long base = n / parts, extra = n % parts;
    *begin = i * base + (i < extra ? i : extra);
    *end = *begin + base + (i < extra ? 1 : 0);
}
