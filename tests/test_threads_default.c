/* The pool's default size: the cores this process may use (its affinity mask, not the
 * machine's), shared among the node's ranks of an Open MPI job started without binding;
 * CFORMERS_THREADS overrides, and a value that is no count is ignored. */
#include <sched.h>
#include <stdlib.h>

#include "cformers/threads.h"
#include "test_util.h"

/* Sets (value non-NULL) or removes environment variable name. */
static void set_env(const char *name, const char *value) {
    if (value) setenv(name, value, 1);
    else unsetenv(name);
}

/* The default under the given Open MPI local size and binding flag (NULL: unset). */
static int default_under(const char *local_size, const char *bound) {
    set_env("OMPI_COMM_WORLD_LOCAL_SIZE", local_size);
    set_env("OMPI_MCA_orte_bound_at_launch", bound);
    return cf_default_num_threads();
}

int main(void) {
    unsetenv("CFORMERS_THREADS");
    cpu_set_t all;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0);
    int cores = CPU_COUNT(&all);
    CHECK(cf_usable_cores() == cores);
    CHECK(default_under(NULL, NULL) == cores);
    CHECK(default_under("2", NULL) == (cores / 2 > 0 ? cores / 2 : 1));
    CHECK(default_under("2", "1") == cores);          /* bound: the binding's cores */
    CHECK(default_under(cores > 1 ? "1000" : "2", NULL) == 1); /* more ranks than cores */

    /* Restricted to one CPU (as taskset or a binding would): one thread. */
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all)) {
            CPU_SET(c, &one);
            break;
        }
    CHECK(sched_setaffinity(0, sizeof one, &one) == 0);
    CHECK(cf_usable_cores() == 1);
    CHECK(default_under(NULL, NULL) == 1);
    cf_set_num_threads(0, NULL);
    CHECK(cf_num_threads() == 1);
    CHECK(sched_setaffinity(0, sizeof all, &all) == 0);

    /* CFORMERS_THREADS overrides; a value that is no count in 1..1024 is ignored. */
    setenv("CFORMERS_THREADS", "3", 1);
    CHECK(default_under("2", NULL) == 3);
    cf_set_num_threads(0, NULL);
    CHECK(cf_num_threads() == 3);
    setenv("CFORMERS_THREADS", "many", 1);
    CHECK(default_under(NULL, NULL) == cores);
    setenv("CFORMERS_THREADS", "0", 1);
    CHECK(default_under(NULL, NULL) == cores);
    return test_finish();
}
