/* SPDX-License-Identifier: Apache-2.0 */
/*
 * recorder.h - CUPOOL_TRACE: every allocation event the shim sees, recorded in
 * the format of trace/trace.h.
 *
 * Each pool (each shard of each device) has a ring, and every event of the
 * pool is appended to it under the pool's own lock: allocations and frees
 * by the pool's observer, segment reserves and releases and fences by the
 * backend the pool calls. So a ring holds its pool's events in the order
 * the lock served them, and a block's free can never land after its reuse,
 * whatever the threads or the clock do. Appending takes no other lock and
 * no system call; the helper thread drains every ring to the file each tick
 * and whenever a ring passes half full. A pool whose ring is full drains it
 * itself, so nothing is dropped for speed. The exit path and SIGTERM drain
 * everything, each ring under its pool's lock so that no producer is caught
 * half-way; after that, records go straight out.
 *
 * Time: the clock is read for every segment reserve and release, and
 * otherwise once per SHIM_TRACE_EVERY records of a ring or when the helper's
 * tick (SHIM_TRACE_TICK_MS) has moved since the ring last read it; records
 * in between carry the last time read. A record's time is thus at most one
 * tick or SHIM_TRACE_EVERY - 1 records of its pool early, never late, and
 * never earlier than a record before it in its ring. Reading the clock for
 * each record cost more than everything else recording does (recorder.c).
 *
 * Events outside any pool (a signal flush, an out-of-memory report) are
 * rare: shim_trace_event writes them at once, with the exact time.
 */
#ifndef CUPOOL_SHIM_RECORDER_H
#define CUPOOL_SHIM_RECORDER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "trace.h"

enum {
    SHIM_TRACE_RING = 16384,  /* records per pool: 384 KiB */
    SHIM_TRACE_EVERY = 32,    /* records per clock read, at most */
    SHIM_TRACE_AHEAD = 32,    /* records the producer prefetches ahead */
    SHIM_TRACE_TICK_MS = 1    /* helper tick while recording */
};

/* 0 = off, 1 = buffered, 2 = every record written at once (exiting). */
extern atomic_int shim_trace_state;

/* Advanced by the helper every SHIM_TRACE_TICK_MS while recording. */
extern atomic_uint shim_trace_ticks;

struct shim_trace_ring;

/* Runs drain(r) with r's producers held off: under the lock its records
 * are written under, or, if that lock is not free soon, without it. The
 * final drain needs it (shim_trace_finish). */
typedef void shim_trace_hold_fn(void *ctx, struct shim_trace_ring *r,
                                void (*drain)(struct shim_trace_ring *r));

typedef struct shim_trace_ring {
    /* The producer's side: whoever holds the pool's lock. */
    _Atomic uint64_t head;   /* records written; only grows */
    uint64_t limit;          /* head may grow to this without reading tail */
    uint64_t stamp;          /* the time records carry until the next read */
    unsigned left;           /* records until the clock is read again */
    unsigned tick;           /* shim_trace_ticks at the last read */
    /* The drainer's side (trace lock), on its own cache line. */
    _Alignas(64) _Atomic uint64_t tail;  /* records drained; only grows */
    atomic_bool woken;       /* the helper was asked to drain this ring */
    struct shim_trace_ring *next;        /* every ring, newest first */
    shim_trace_hold_fn *hold;            /* NULL: nothing to hold off */
    void *hold_ctx;
    trace_record rec[SHIM_TRACE_RING];
} shim_trace_ring;

static inline int shim_tracing(void)
{
    return atomic_load_explicit(&shim_trace_state, memory_order_relaxed);
}

/* A timestamp in the units records carry until drained (TSC ticks on
 * x86-64, nanoseconds elsewhere). */
uint64_t shim_trace_now(void);

/* A new ring, drained with the others from now on, whose producers hold
 * (ctx) holds off; NULL (logged) if no memory. Rings live as long as the
 * process, like the pools. */
shim_trace_ring *shim_trace_ring_new(shim_trace_hold_fn *hold, void *ctx);

/* Writes one record at once, stamped now, under the trace lock: for events
 * outside any pool, and for a pool whose ring could not be made. */
void shim_trace_event(trace_op op, trace_result res, int dev, uint64_t addr,
                      uint64_t size);

/* shim_trace_put when anything but a plain append is due: no ring, the
 * clock to read, the limit reached, or the exit path. */
void shim_trace_put_slow(shim_trace_ring *r, trace_op op, trace_result res,
                         int dev, uint64_t addr, uint64_t size);

/* test_recorder.c stops a producer here, between reading the state and
 * publishing its record, to run the final drain in that window. */
#ifdef SHIM_TRACE_TESTING
void shim_trace_test_window(void);
#else
static inline void shim_trace_test_window(void) {}
#endif

/* Writes the record at head, stamped with r's time, and publishes it. */
static inline void shim_trace_ring_store(shim_trace_ring *r, uint64_t head,
                                         trace_op op, trace_result res, int dev,
                                         uint64_t addr, uint64_t size)
{
    shim_trace_test_window();
    trace_record *rec = &r->rec[head % SHIM_TRACE_RING];
    rec->time = r->stamp;
    rec->addr = addr;
    rec->word = trace_word(op, res, (unsigned)dev, size);
    atomic_store_explicit(&r->head, head + 1, memory_order_release);
}

/* Appends one record to r. The caller holds the lock r belongs to (one
 * producer at a time). exact: read the clock for this record. The common
 * case calls nothing, so that it costs the observer no saved registers. */
static inline void shim_trace_put(shim_trace_ring *r, bool exact, trace_op op,
                                  trace_result res, int dev, uint64_t addr,
                                  uint64_t size)
{
    int state = shim_tracing();
    if (!state)
        return;
    if (__builtin_expect(!r || exact || state != 1, 0))
        goto slow;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    unsigned tick = atomic_load_explicit(&shim_trace_ticks, memory_order_relaxed);
    if (__builtin_expect(head >= r->limit || r->left <= 1 || tick != r->tick, 0))
        goto slow;
    r->left--;
    /* The slots ahead were last read by the drainer on another core, or
     * never touched: fetching them now takes the cache misses off this
     * path (on an H200's host it took a recorded 512-byte pair from 1.21x
     * to 1.09x an unrecorded one; 96 ahead did worse than 32). Making this
     * path a leaf, with no register to save, took it to 1.02x. */
    __builtin_prefetch(&r->rec[(head + SHIM_TRACE_AHEAD) % SHIM_TRACE_RING], 1, 3);
    shim_trace_ring_store(r, head, op, res, dev, addr, size);
    return;
slow:
    shim_trace_put_slow(r, op, res, dev, addr, size);
}

/* Opens the trace file named by the pattern (%p = pid) and starts
 * recording, at most max bytes of it (0: no limit; past it recording stops
 * with a warning, and the file holds whole records). Logs and stays off
 * on failure. */
void shim_trace_open(const char *pattern, uint64_t max);

/* Writes every ring's records to the file (helper tick, SIGTERM). */
void shim_trace_drain(void);

/* Switches to writing each record at once, then drains every ring with
 * its producers held off, so that no record made before the switch is left
 * behind: for the exit path and SIGTERM, after which no thread may be left
 * to drain. */
void shim_trace_finish(void);

/* Stops recording in a forked child (the file is the parent's). */
void shim_trace_after_fork(void);

#endif
