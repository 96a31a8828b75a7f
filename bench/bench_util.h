/* Order statistics shared by the benchmarks (each reports medians of repeated runs). */
#ifndef CFORMERS_BENCH_UTIL_H
#define CFORMERS_BENCH_UTIL_H

#include <stdlib.h>

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v[0..n) ascending. */
static inline void bench_sort(double *v, int n) { qsort(v, (size_t)n, sizeof *v, bench_cmp_double); }

/* The median of v[0..n) (sorting v): the middle value, or the mean of the two middle ones. */
static inline double bench_median(double *v, int n) {
    bench_sort(v, n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
