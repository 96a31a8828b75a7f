/* A small fork-join pool: workers wait for a job's ticket, spin briefly for low latency
 * between back-to-back kernels, then yield the core, then sleep on a condition variable.
 *
 * On a busy machine a worker may not get a core for milliseconds. A task job (parallel
 * for) therefore does not wait for workers that have not joined it: its tasks are claimed
 * as they run, so the caller does them all if need be, then closes the job, and a worker
 * arriving late finds it closed and leaves it alone. The caller waits only for workers
 * that joined (and so may hold a task). The ticket is one atomic word: the job's
 * generation (high 32 bits), a closed bit and the count of workers that joined, so
 * joining is one compare-and-swap that fails once the job is closed or replaced. Team
 * jobs need every thread and are never closed early. */
#include "cformers/threads.h"

#include "cformers/error.h"
#include "core/fault.h"
#include "core/kernel_status.h"
#include "obs/clock.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Waiting: this many pauses, then this many sched_yield calls (handing the core to
 * whatever else is runnable), then sleep. */
enum { SPIN_PAUSES = 4000, SPIN_YIELDS = 2000 };

/* A worker that joined a parallel-for and then lost its core (a busy machine) keeps its
 * task until the scheduler gives it one back, often milliseconds later, while the caller,
 * done with the rest, waits. When the caller waited more than STRAGGLE_FACTOR times its
 * own share of the job (and at least STRAGGLE_MIN_S), the next parallel-for jobs run on
 * the caller alone for a while: SOLO_FIRST_S, doubled each time the first job after it
 * straggles again, up to SOLO_MAX_S (short, so threads come back soon after the machine
 * frees up). So on a busy machine N threads cost about what one does instead of a
 * scheduler time slice per job; team jobs, which need every thread, are not affected. */
enum { STRAGGLE_FACTOR = 2 };
#define STRAGGLE_MIN_S 100e-6
#define SOLO_FIRST_S 0.02
#define SOLO_MAX_S 0.2
#define TICKET_CLOSED ((uint64_t)1 << 31)
#define TICKET_COUNT (TICKET_CLOSED - 1)

typedef struct job {
    cf_task_fn task_fn;
    cf_team_fn team_fn;
    void *ctx;
    int n_tasks;
    atomic_int next_task;
    unsigned fp_mode; /* the dispatching thread's MXCSR */
    cf_kernel_status *kernel_status; /* the dispatching thread's plan-run error slot, or NULL */
} job;

static struct {
    pthread_mutex_t dispatch_lock; /* one caller's job (or resize) at a time */
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_cond_t done;
    pthread_t *workers;
    int n_threads;           /* including the caller */
    _Atomic uint64_t ticket; /* generation << 32 | closed | workers joined (see above) */
    unsigned start_generation;
    atomic_int left;         /* workers that joined the current job and finished it */
    atomic_int barrier_count;
    atomic_uint barrier_phase;
    job current;
    bool shutdown;
    bool started;
    double solo_until, solo_window; /* parallel-for jobs on the caller alone until then (see above) */
} pool = {.ticket = TICKET_CLOSED,
        .dispatch_lock = PTHREAD_MUTEX_INITIALIZER,
        .lock = PTHREAD_MUTEX_INITIALIZER,
        .wake = PTHREAD_COND_INITIALIZER,
        .done = PTHREAD_COND_INITIALIZER};

static _Thread_local bool tls_in_pool;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

static void run_job(job *j, int thread) {
    tls_in_pool = true;
    if (j->team_fn) {
        j->team_fn(j->ctx, thread, pool.n_threads);
    } else {
        for (;;) {
            int t = atomic_fetch_add_explicit(&j->next_task, 1, memory_order_relaxed);
            if (t >= j->n_tasks) break;
            j->task_fn(j->ctx, t, thread);
        }
    }
    tls_in_pool = false;
}

static unsigned ticket_generation(uint64_t t) { return (unsigned)(t >> 32); }

/* Spins, then yields, then sleeps until the ticket's generation is not `seen` (or the
 * pool shuts down); returns the ticket. */
static uint64_t wait_for_job(unsigned seen) {
    for (int i = 0; i < SPIN_PAUSES + SPIN_YIELDS; i++) {
        uint64_t t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
        if (ticket_generation(t) != seen) return t;
        if (i < SPIN_PAUSES) _mm_pause();
        else sched_yield();
    }
    pthread_mutex_lock(&pool.lock);
    uint64_t t;
    while (ticket_generation(t = atomic_load(&pool.ticket)) == seen && !pool.shutdown)
        pthread_cond_wait(&pool.wake, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    return t;
}

/* Joins job `gen` unless it is closed or already replaced. */
static bool join_job(uint64_t t, unsigned gen) {
    while (ticket_generation(t) == gen && !(t & TICKET_CLOSED))
        if (atomic_compare_exchange_weak_explicit(&pool.ticket, &t, t + 1, memory_order_acq_rel, memory_order_acquire))
            return true;
    return false;
}

static void *worker_main(void *arg) {
    int thread = (int)(long)arg;
    /* The generation at start-up, not at first run: a job may already be posted. */
    unsigned seen = pool.start_generation;
    for (;;) {
        uint64_t t = wait_for_job(seen);
        if (pool.shutdown) return NULL;
        seen = ticket_generation(t);
        if (!join_job(t, seen)) continue; /* finished without us, or a newer job: the next wait says */
        /* The job runs in its caller's floating-point mode (rounding, denormals as zero:
         * core/denormals.h), as a serial run would; the worker's own comes back after. */
        unsigned own_mode = _mm_getcsr();
        _mm_setcsr(pool.current.fp_mode);
        cf_kernel_status_current = pool.current.kernel_status; /* its kernels report to the caller's run */
        run_job(&pool.current, thread);
        cf_kernel_status_current = NULL;
        _mm_setcsr(own_mode);
        bool team = pool.current.team_fn != NULL; /* read before leaving: the next job may overwrite it */
        /* seq_cst against the caller's close then load of `left`: one of the two sees the other */
        int done = atomic_fetch_add(&pool.left, 1) + 1;
        uint64_t now = atomic_load(&pool.ticket);
        bool last = team ? done == pool.n_threads - 1 : (now & TICKET_CLOSED) && (int)(now & TICKET_COUNT) == done;
        if (last) { /* the caller may be asleep waiting for this */
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
    }
}

int cf_usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The ranks of an Open MPI job on this node, when mpirun started them without binding
 * (each may then run on every core, so they share them); 1 otherwise. */
static int unbound_local_ranks(void) {
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), *bound = getenv("OMPI_MCA_orte_bound_at_launch");
    if (!local || (bound && strcmp(bound, "1") == 0)) return 1;
    long n = strtol(local, NULL, 10);
    return n > 1 && n <= 1 << 20 ? (int)n : 1;
}

int cf_default_num_threads(void) {
    const char *env = getenv("CFORMERS_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (!*end && n >= 1 && n <= 1024) return (int)n;
        fprintf(stderr, "cformers: ignoring CFORMERS_THREADS=%s: not a thread count in 1..1024\n", env);
    }
    int n = cf_usable_cores() / unbound_local_ranks();
    return n > 0 ? n : 1;
}

static void stop_workers(void) {
    if (!pool.started) return;
    pthread_mutex_lock(&pool.lock);
    pool.shutdown = true;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 1; i < pool.n_threads; i++) pthread_join(pool.workers[i - 1], NULL);
    free(pool.workers);
    pool.workers = NULL;
    pool.started = false;
    pool.shutdown = false;
}

/* Starts workers 1 .. n-1. When the system refuses a thread (pthread_create: a thread or
 * memory limit), the pool keeps the threads it has, at least the caller's (results do not
 * depend on the thread count, only speed does), and this returns -1 saying so. Workers
 * read n_threads only inside a job, which no one posts before this returns. */
static int start_workers(int n, cf_error *err) {
    pool.start_generation = ticket_generation(atomic_load(&pool.ticket));
    pool.workers = cf_xcalloc((size_t)(n > 1 ? n - 1 : 1), sizeof(pthread_t));
    int started = 1, rc = 0;
    for (; started < n; started++) {
        int e = cf_thread_create(&pool.workers[started - 1], worker_main, (void *)(long)started);
        if (e != 0) {
            rc = cf_fail(err, "thread pool: cannot start thread %d of %d (pthread_create: %s); running on %d", started + 1,
                         n, strerror(e), started);
            break;
        }
    }
    pool.n_threads = started;
    pool.started = true;
    return rc;
}

/* Starts the pool's workers where no caller can take an error (the first use, the first
 * job after a fork): a refused thread is said on stderr and the pool runs on fewer. */
static void start_workers_or_warn(int n) {
    cf_error err;
    if (start_workers(n, &err) != 0) fprintf(stderr, "cformers: %s\n", err.msg);
}

/* In a child forked from a process using the pool, only the forking thread exists: the
 * workers are gone, and so is anything they held. The child forgets them, its locks and
 * wake-ups start fresh, and its first job starts new workers (a server that forks after
 * loading a model, a test that runs a case in a child). */
static void forget_workers_after_fork(void) {
    pool.dispatch_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    pool.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    pool.wake = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    pool.done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    atomic_store(&pool.barrier_count, 0);
    atomic_store(&pool.ticket, atomic_load(&pool.ticket) | TICKET_CLOSED);
    atomic_store(&pool.left, 0);
    free(pool.workers);
    pool.workers = NULL;
    pool.started = false;
}

static void init_pool(void) {
    start_workers_or_warn(cf_default_num_threads());
    atexit(stop_workers);
    pthread_atfork(NULL, NULL, forget_workers_after_fork);
}

int cf_num_threads(void) {
    pthread_once(&init_once, init_pool);
    return pool.n_threads;
}

int cf_set_num_threads(int n, cf_error *err) {
    if (tls_in_pool) /* its job holds the pool: resizing would wait for itself */
        return cf_fail(err, "cf_set_num_threads called from inside a pool task");
    pthread_once(&init_once, init_pool);
    if (n < 1) n = cf_default_num_threads();
    int rc = 0;
    pthread_mutex_lock(&pool.dispatch_lock);
    if (n != pool.n_threads) {
        stop_workers();
        rc = start_workers(n, err);
    }
    pthread_mutex_unlock(&pool.dispatch_lock);
    return rc;
}

bool cf_in_parallel(void) { return tls_in_pool; }

/* Waits until `want` workers have left the current job: spins, yields, then sleeps. */
static void wait_for_workers(int want) {
    for (int i = 0; i < SPIN_PAUSES + SPIN_YIELDS; i++) {
        if (atomic_load(&pool.left) >= want) return;
        if (i < SPIN_PAUSES) _mm_pause();
        else sched_yield();
    }
    pthread_mutex_lock(&pool.lock);
    while (atomic_load(&pool.left) < want) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
}

/* After a parallel-for that `waited` for joined workers past the caller's `own` share:
 * starts, lengthens or ends the solo window (see STRAGGLE_FACTOR). */
static void note_wait(double now, double own, double waited) {
    if (waited > STRAGGLE_FACTOR * own && waited > STRAGGLE_MIN_S) {
        double w = pool.solo_window > 0 ? 2 * pool.solo_window : SOLO_FIRST_S;
        pool.solo_window = w < SOLO_MAX_S ? w : SOLO_MAX_S;
        pool.solo_until = now + pool.solo_window;
    } else {
        pool.solo_window = 0;
    }
}

static void run_on_pool(job *j) {
    double start = j->team_fn ? 0 : cf_clock_seconds();
    if (pool.n_threads == 1 || (!j->team_fn && start < pool.solo_until)) {
        run_job(j, 0);
        return;
    }
    pool.current.task_fn = j->task_fn;
    pool.current.team_fn = j->team_fn;
    pool.current.ctx = j->ctx;
    pool.current.n_tasks = j->n_tasks;
    pool.current.fp_mode = _mm_getcsr();
    pool.current.kernel_status = cf_kernel_status_current;
    atomic_store(&pool.current.next_task, 0);
    atomic_store(&pool.left, 0);
    unsigned gen = ticket_generation(atomic_load(&pool.ticket)) + 1;
    pthread_mutex_lock(&pool.lock);
    atomic_store_explicit(&pool.ticket, (uint64_t)gen << 32, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    run_job(&pool.current, 0);

    if (j->team_fn) { /* every thread takes part: wait for all, then close */
        wait_for_workers(pool.n_threads - 1);
        atomic_fetch_or(&pool.ticket, TICKET_CLOSED);
        return;
    }
    /* every task is claimed: close the job to latecomers, wait for those that joined */
    double own = cf_clock_seconds() - start;
    uint64_t t = atomic_fetch_or(&pool.ticket, TICKET_CLOSED);
    wait_for_workers((int)(t & TICKET_COUNT));
    if (t & TICKET_COUNT) {
        double now = cf_clock_seconds();
        note_wait(now, own, now - start - own);
    }
}

/* Callers outside the pool take turns (the workers, the job slot and the thread ids
 * serve one job at a time): a second caller waits for the first one's job to finish. */
static void dispatch(job *j) {
    pthread_once(&init_once, init_pool);
    pthread_mutex_lock(&pool.dispatch_lock);
    if (!pool.started) start_workers_or_warn(pool.n_threads); /* first job after a fork */
    run_on_pool(j);
    pthread_mutex_unlock(&pool.dispatch_lock);
}

void cf_parallel_for(int n_tasks, cf_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (tls_in_pool || n_tasks == 1) {
        for (int t = 0; t < n_tasks; t++) fn(ctx, t, 0);
        return;
    }
    job j = {.task_fn = fn, .ctx = ctx, .n_tasks = n_tasks};
    dispatch(&j);
}

static _Thread_local bool tls_serial_team;

void cf_parallel_team(cf_team_fn fn, void *ctx) {
    if (tls_in_pool) {
        tls_serial_team = true;
        fn(ctx, 0, 1);
        tls_serial_team = false;
        return;
    }
    job j = {.team_fn = fn, .ctx = ctx};
    dispatch(&j);
}

void cf_team_barrier(void) {
    if (tls_serial_team || pool.n_threads == 1) return;
    unsigned phase = atomic_load_explicit(&pool.barrier_phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool.barrier_count, 1, memory_order_acq_rel) == pool.n_threads - 1) {
        atomic_store_explicit(&pool.barrier_count, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool.barrier_phase, 1, memory_order_release);
        return;
    }
    while (atomic_load_explicit(&pool.barrier_phase, memory_order_acquire) == phase) {
        _mm_pause();
        sched_yield();
    }
}

void cf_split_range(long n, int parts, int i, long *begin, long *end) {
    long base = n / parts, extra = n % parts;
    *begin = i * base + (i < extra ? i : extra);
    *end = *begin + base + (i < extra ? 1 : 0);
}
