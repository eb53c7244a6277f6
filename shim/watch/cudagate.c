/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cudagate.c - see cudagate.h.
 *
 * closed and active are sequentially consistent atomics: a thread counts
 * itself in, then looks at closed; the mover closes, then looks at active,
 * so one of the two sees the other (as in gate.c). A thread that finds the
 * gate closed counts itself out and waits under the lock.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "cudagate.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved = PTHREAD_COND_INITIALIZER; /* the gate opened */
static atomic_bool closed;
static atomic_uint active, waiting;
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
    atomic_fetch_add(&active, 1);
    if (!atomic_load(&closed))
        return;
    pthread_mutex_lock(&lock);
    atomic_fetch_sub(&active, 1);
    atomic_fetch_add(&waiting, 1);
    while (atomic_load(&closed))
        pthread_cond_wait(&moved, &lock);
    atomic_fetch_sub(&waiting, 1);
    atomic_fetch_add(&active, 1);
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
        atomic_fetch_sub(&active, 1);
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
        *inside = atomic_load(&active);
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

bool shim_cudagate_closed(void)
{
    return atomic_load(&closed);
}

unsigned shim_cudagate_waiting(void)
{
    return atomic_load(&waiting);
}

uint64_t shim_cudagate_strays(void)
{
    return atomic_load(&strays);
}
