/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock_cost.c - what a trace timestamp costs on this host: RDTSC plain,
 * fenced and RDTSCP, and clock_gettime (fine and coarse), per call, in a
 * tight loop. Prints one line per clock.
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(void)
{
    enum { N = 10000000 };
    volatile uint64_t sink = 0;
    unsigned aux;
    struct timespec ts;
    double t0 = now();
    for (int i = 0; i < N; i++)
        sink += __rdtsc();
    double t1 = now();
    printf("rdtsc                 %5.1f ns\n", (t1 - t0) / N);
    t0 = now();
    for (int i = 0; i < N; i++) {
        _mm_lfence();
        sink += __rdtsc();
        _mm_lfence();
    }
    t1 = now();
    printf("lfence rdtsc lfence   %5.1f ns\n", (t1 - t0) / N);
    t0 = now();
    for (int i = 0; i < N; i++)
        sink += __rdtscp(&aux);
    t1 = now();
    printf("rdtscp                %5.1f ns\n", (t1 - t0) / N);
    t0 = now();
    for (int i = 0; i < N; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        sink += (uint64_t)ts.tv_nsec;
    }
    t1 = now();
    printf("clock_gettime         %5.1f ns\n", (t1 - t0) / N);
    t0 = now();
    for (int i = 0; i < N; i++) {
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        sink += (uint64_t)ts.tv_nsec;
    }
    t1 = now();
    printf("clock_gettime coarse  %5.1f ns\n", (t1 - t0) / N);
    return 0;
}
