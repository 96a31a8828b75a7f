/* Monotonic wall clock for throughput and ETA. */
#ifndef CFORMERS_OBS_CLOCK_H
#define CFORMERS_OBS_CLOCK_H

#include <time.h>

static inline double cf_clock_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
