/* Shared by the C microbenchmarks here: a monotonic clock and sorting of samples. */
#ifndef GPUMPI_MICRO_TIMING_H
#define GPUMPI_MICRO_TIMING_H
#include <stdlib.h>
#include <time.h>

/* qsort comparison of doubles, ascending. */
static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Monotonic time in nanoseconds. */
static inline double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Sorts v (n samples) in place and returns its median. */
static inline double median_sorted(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_double);
    return v[n / 2];
}
#endif
