/* SPDX-License-Identifier: Apache-2.0 */
/*
 * common.c - what the scenarios share: sleeping, a filled segment, a second
 * thread, the simulated device's counters.
 */
#include "prog.h"

void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Two 1 MiB blocks fill one 2 MiB small segment, so a freed one can only
 * be reused through a fence. */
void fill_segment(void **a, void **b)
{
    OK(cudaMalloc(a, MIB));
    OK(cudaMalloc(b, MIB));
    CHECK((char *)*b == (char *)*a + MIB);
}

/* Runs fn in a second thread (which gets its own shard) and waits. */
void in_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, arg) == 0);
    pthread_join(t, NULL);
}

#ifdef SIMCUDA
simcuda_stats sim(int dev)
{
    simcuda_stats s;
    simcuda_get_stats(dev, &s);
    return s;
}
#endif /* SIMCUDA */
