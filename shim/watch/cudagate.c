/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cudagate.c - see cudagate.h.
 *
 * closed and the counts of threads inside are sequentially consistent
 * atomics: a thread counts itself in, then looks at closed; the mover
 * closes, then sums the counts, so one of the two sees the other (as in
 * gate.c). A thread that finds the gate closed counts itself out and waits
 * under the lock.
 *
 * Every cudaMalloc and cudaFree passes here, from every thread at once:
 * each thread counts itself in its own slot, a cache line of its own, so
 * the open gate costs a thread an uncontended add, never a line shared
 * with the others (one shared count made 8 threads' pool hits 3.8 times
 * slower). Slots are not given back; threads past SLOTS share one count.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "cudagate.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved = PTHREAD_COND_INITIALIZER; /* the gate opened */
static atomic_bool closed;
enum { SLOTS = 512 };
static struct {
    _Alignas(64) atomic_uint n;
} slots[SLOTS + 1];                         /* the last one is shared */
static atomic_uint nslots;                  /* slots handed out */
static _Thread_local atomic_uint *mine;     /* this thread's count */

/* This thread's count of its calls inside (its own slot, or the shared
 * one). */
static atomic_uint *inside_count(void)
{
    if (!mine) {
        unsigned i = atomic_fetch_add_explicit(&nslots, 1, memory_order_relaxed);
        mine = &slots[i < SLOTS ? i : SLOTS].n;
    }
    return mine;
}

/* Threads inside a call now, summed over the slots. */
static unsigned inside_now(void)
{
    unsigned n = atomic_load(&nslots), sum = 0;
    for (unsigned i = 0; i < (n < SLOTS ? n : SLOTS); i++)
        sum += atomic_load(&slots[i].n);
    return sum + atomic_load(&slots[SLOTS].n);
}
static _Atomic uint64_t strays;
static _Thread_local unsigned depth; /* this thread's calls entered */
static _Thread_local bool exempt;

void shim_cudagate_exempt(bool on)
{
    exempt = on;
}

void shim_cudagate_enter(void)
{
    if (exempt || depth++)
        return;
    atomic_uint *in = inside_count();
    atomic_fetch_add(in, 1);
    if (!atomic_load(&closed))
        return;
    pthread_mutex_lock(&lock);
    atomic_fetch_sub(in, 1);
    while (atomic_load(&closed))
        pthread_cond_wait(&moved, &lock);
    atomic_fetch_add(in, 1);
    pthread_mutex_unlock(&lock);
}

void shim_cudagate_leave(void)
{
    if (exempt)
        return;
    if (!depth) { /* entered before CUPTI watched */
        if (atomic_load(&closed))
            atomic_fetch_add(&strays, 1);
        return;
    }
    if (--depth == 0)
        atomic_fetch_sub(inside_count(), 1);
}

void shim_cudagate_close(void)
{
    pthread_mutex_lock(&lock);
    atomic_store(&strays, 0);
    atomic_store(&closed, true);
    pthread_mutex_unlock(&lock);
}

bool shim_cudagate_quiet(unsigned ms, unsigned *inside)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        *inside = inside_now();
        if (!*inside)
            return true;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >= ms)
            return false;
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
    }
}

void shim_cudagate_open(void)
{
    pthread_mutex_lock(&lock);
    atomic_store(&closed, false);
    pthread_cond_broadcast(&moved);
    pthread_mutex_unlock(&lock);
}

uint64_t shim_cudagate_strays(void)
{
    return atomic_load(&strays);
}
