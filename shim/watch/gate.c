/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gate.c - see gate.h.
 *
 * closed and active are atomics so that the open gate costs no lock: a
 * thread counts itself in, then looks at closed; the helper closes, then
 * looks at active (both sequentially consistent), so one of the two sees
 * the other. The helper holds the gate (no opening by itself) before it
 * suspends, and judges there is no thread inside under the lock: from
 * then on a thread arriving can only wait, unless behind its target. A thread that finds the gate closed counts itself out again
 * and waits under the lock. Order of locks: the gate's, then what behind
 * takes (job.c's table).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "gate.h"
#include "log.h"
#include "process.h"

/* How often a call waiting at a held gate says so. */
#define HELD_TELL_NS (60ull * 1000000000ull)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t moved;   /* the gate opened, or its targets moved */
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_bool closed;
static atomic_uint active, waiting;
static bool held;              /* suspended: no opening by itself */
static uint64_t open_at_ns;    /* CLOCK_MONOTONIC, when not held */
static uint64_t ids[STATS_MAX_COMMS], targets[STATS_MAX_COMMS];
static size_t ntargets;

static void init(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&moved, &a);
    pthread_condattr_destroy(&a);
}

/* Opens the gate. Needs lock. */
static void open_locked(void)
{
    atomic_store(&closed, false);
    held = false;
    ntargets = 0;
    pthread_cond_broadcast(&moved);
}

/* The hold ran out with nothing suspended: opens. Needs lock. */
static void expired_locked(void)
{
    shim_log(SHIM_LOG_WARN, "the NCCL gate cupool closed opens by itself: its controller "
             "took too long, or ended");
    open_locked();
}

void shim_gate_enter(void *comm, shim_gate_behind behind)
{
    atomic_fetch_add(&active, 1);
    if (!atomic_load(&closed))
        return;
    pthread_once(&once, init);
    pthread_mutex_lock(&lock);
    atomic_fetch_sub(&active, 1);
    uint64_t told = clock_mono_ns();
    while (atomic_load(&closed) && !behind(comm, ids, targets, ntargets)) {
        uint64_t now = clock_mono_ns();
        if (!held && now >= open_at_ns) {
            expired_locked();
            break;
        }
        if (held && now - told >= HELD_TELL_NS) { /* said once a minute per waiter */
            told = now;
            shim_log(SHIM_LOG_WARN, "an NCCL call waits at the gate cupool closed, its "
                     "communicators suspended (cupool pause): cupool resume %d lets it go",
                     (int)getpid());
        }
        uint64_t until = held ? now + 1000000000u : open_at_ns;
        struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
        atomic_fetch_add(&waiting, 1);
        pthread_cond_timedwait(&moved, &lock, &ts);
        atomic_fetch_sub(&waiting, 1);
    }
    atomic_fetch_add(&active, 1);
    pthread_mutex_unlock(&lock);
}

void shim_gate_leave(void)
{
    atomic_fetch_sub(&active, 1);
}

void shim_gate_close(const uint64_t *id, const uint64_t *target, size_t n, uint32_t hold_s)
{
    pthread_once(&once, init);
    pthread_mutex_lock(&lock);
    ntargets = n < STATS_MAX_COMMS ? n : STATS_MAX_COMMS;
    memcpy(ids, id, ntargets * sizeof(*ids));
    memcpy(targets, target, ntargets * sizeof(*targets));
    if (!held)
        open_at_ns = clock_mono_ns() + (uint64_t)(hold_s ? hold_s : 1) * 1000000000u;
    if (!atomic_load(&closed))
        shim_count_add(SHIM_nccl_gate_closes, 1);
    atomic_store(&closed, true);
    pthread_cond_broadcast(&moved);
    pthread_mutex_unlock(&lock);
}

/* Whether the gate is closed, not run out, with no thread past it. Needs
 * lock. */
static bool stopped_locked(void)
{
    if (atomic_load(&closed) && !held && clock_mono_ns() >= open_at_ns)
        expired_locked();
    return atomic_load(&closed) && atomic_load(&active) == 0;
}

bool shim_gate_try_hold(void)
{
    pthread_once(&once, init);
    pthread_mutex_lock(&lock);
    /* A thread arriving counts itself in before it waits for this lock to
     * count itself out: such a count goes in a moment, one past the gate
     * (behind its target) does not. */
    bool ok = stopped_locked();
    for (int i = 0; i < 100 && !ok && atomic_load(&closed); i++) {
        held = true; /* no opening by itself meanwhile */
        pthread_mutex_unlock(&lock);
        nanosleep(&(struct timespec){0, 1000000L}, NULL);
        pthread_mutex_lock(&lock);
        held = false;
        ok = stopped_locked();
    }
    held = ok;
    pthread_mutex_unlock(&lock);
    return ok;
}

void shim_gate_unhold(void)
{
    pthread_once(&once, init);
    pthread_mutex_lock(&lock);
    held = false;
    pthread_mutex_unlock(&lock);
}

void shim_gate_open(void)
{
    pthread_once(&once, init);
    pthread_mutex_lock(&lock);
    open_locked();
    pthread_mutex_unlock(&lock);
}

void shim_gate_view(stats_gate *g)
{
    if (atomic_load(&closed)) {
        pthread_mutex_lock(&lock);
        if (atomic_load(&closed) && !held && clock_mono_ns() >= open_at_ns)
            expired_locked();
        pthread_mutex_unlock(&lock);
    }
    g->state = atomic_load(&closed) ? STATS_GATE_CLOSED : STATS_GATE_OPEN;
    g->active = atomic_load(&active);
    g->waiting = atomic_load(&waiting);
}
