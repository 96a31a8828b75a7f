/* The set-up and verdict every training test under mpirun shares (mpi_data_parallel,
 * mpi_pipeline, mpi_tensor_parallel). */
#ifndef CFORMERS_TESTS_MPI_TEST_UTIL_H
#define CFORMERS_TESTS_MPI_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cformers/dist.h"
#include "test_util.h"
#include "train_test_util.h"

/* Joins the job and makes its scratch directory dir = /tmp/cformers_<name>_<rank 0's pid>
 * holding the training text (text.txt, written by rank 0), every rank past the barrier;
 * NULL (a failed check) when the job cannot be joined. */
static inline cf_dist *mpi_test_open(const char *name, char *dir, size_t cap) {
    cf_error err = {{0}};
    cf_dist *d = cf_dist_open(&err);
    CHECK_MSG(d != NULL, "cf_dist_open: %s", err.msg);
    if (!d) return NULL;
    int id = (int)getpid();
    CHECK(cf_dist_bcast(d, &id, sizeof id, 0, &err) == 0);
    snprintf(dir, cap, "/tmp/cformers_%s_%d", name, id);
    if (cf_dist_rank(d) == 0) {
        CHECK(mkdir(dir, 0700) == 0);
        char path[300];
        snprintf(path, sizeof path, "%s/text.txt", dir);
        train_test_write_text(path);
    }
    CHECK(cf_dist_barrier(d, &err) == 0);
    return d;
}

/* Removes dir (rank 0, once every rank is done with it) and leaves the job; returns the
 * test's exit status, every rank's verdict: a failure on any rank fails the job. */
static inline int mpi_test_close(cf_dist *d, const char *dir) {
    cf_error err = {{0}};
    cf_dist_barrier(d, &err);
    if (cf_dist_rank(d) == 0) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
    }
    double failures = test_failures;
    cf_dist_sum_f64(d, &failures, 1, &err);
    test_failures = (int)failures;
    cf_dist_close(d);
    return test_finish();
}

#endif
