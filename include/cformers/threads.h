/* The engine's thread pool. One pool per process, sized to CFORMERS_THREADS or else to
 * the cores this process may use (cf_default_num_threads). Every multithreaded kernel
 * runs on it, so nothing oversubscribes: a parallel call made from inside a pool task
 * runs serially on the calling thread.
 *
 * The calling thread takes part in the work, so a pool of N threads starts N-1 workers.
 * Several threads of a program may call in at once: their jobs take turns, each caller
 * waiting until the pool has finished the job before its own. A child process forked
 * from a program using the pool starts workers of its own at its first job.
 *
 * Tasks run in the floating-point mode of the thread that called (x86 MXCSR: rounding,
 * denormals as zero), as they would if that thread ran them all; each worker's own
 * mode comes back after the job (Intel's OpenMP runtime does the same by default,
 * KMP_INHERIT_FP_CONTROL). The engine computes with denormals as zero and sets that
 * mode itself around its products, plan runs and inference forwards. */
#ifndef CFORMERS_THREADS_H
#define CFORMERS_THREADS_H
#include "cformers/export.h"
CF_API_BEGIN

#include <stdbool.h>

#include "cformers/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs fn(ctx, task, thread) for task = 0 .. n_tasks-1, spread dynamically over the
 * pool; returns when all are done. `thread` is in [0, cf_num_threads()) and is unique
 * among the call's tasks running at the same time, so it can index per-thread scratch
 * space that belongs to the call. A single task runs at once on the caller (thread 0),
 * not waiting for the pool. */
typedef void (*cf_task_fn)(void *ctx, int task, int thread);
void cf_parallel_for(int n_tasks, cf_task_fn fn, void *ctx);

/* Runs fn(ctx, thread, n_threads) exactly once on each of the pool's threads (or once,
 * with n_threads = 1, when called from inside the pool). Inside it, threads may call
 * cf_team_barrier() to wait for each other. */
typedef void (*cf_team_fn)(void *ctx, int thread, int n_threads);
void cf_parallel_team(cf_team_fn fn, void *ctx);
void cf_team_barrier(void);

/* Splits [0, n) into `parts` nearly equal contiguous ranges; range `i` is [*begin, *end). */
void cf_split_range(long n, int parts, int i, long *begin, long *end);

int cf_num_threads(void);
/* The CPUs this process may run on (its affinity mask: a cpuset, taskset or an MPI
 * launcher's binding), at least 1. */
int cf_usable_cores(void);
/* The pool's size unless told otherwise: CFORMERS_THREADS when it holds a count in
 * 1..1024 (another value is ignored with a warning on stderr); else cf_usable_cores(),
 * divided among the node's ranks (OMPI_COMM_WORLD_LOCAL_SIZE) of an Open MPI job that
 * mpirun started without binding them to cores, at least 1. */
int cf_default_num_threads(void);
/* Resizes the pool (n < 1 means the default), once any job running on it has finished.
 * Fails, naming the reason, when called from inside a pool task (the pool is unchanged)
 * or when the system refuses a thread: the pool then keeps the threads it could start
 * (cf_num_threads says how many; results do not depend on it). The pool's first use
 * sizes it to cf_default_num_threads() and says on stderr if it started fewer. */
int cf_set_num_threads(int n, cf_error *err);
/* True while the calling thread is running a pool task. */
bool cf_in_parallel(void);

#ifdef __cplusplus
}
#endif
CF_API_END
#endif
