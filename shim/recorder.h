/*
 * recorder.h - CUPOOL_TRACE: every allocation event the shim sees, recorded in
 * the format of stats/trace.h.
 *
 * A thread appends records to its own ring (no lock, no system call); the
 * helper thread drains every ring to the file each tick and whenever a
 * ring passes half full. A thread whose ring is full drains its own ring
 * under the trace lock, so nothing is dropped for speed. The exit path and
 * SIGTERM drain everything; after exit began, records go straight out.
 */
#ifndef CUPOOL_SHIM_RECORDER_H
#define CUPOOL_SHIM_RECORDER_H

#include <stdatomic.h>
#include <stdint.h>

#include "trace.h"

/* 0 = off, 1 = buffered, 2 = every record written at once (exiting). */
extern atomic_int shim_trace_state;

/* A timestamp in the units records carry until drained (TSC ticks on
 * x86-64, nanoseconds elsewhere). */
uint64_t shim_trace_now(void);

/* Appends one record stamped at time (from shim_trace_now). */
void shim_trace_put_at(uint64_t time, trace_op op, trace_result r, int dev,
                       uint64_t addr, uint64_t size);

static inline void shim_trace(trace_op op, trace_result r, int dev,
                              uint64_t addr, uint64_t size)
{
    if (atomic_load_explicit(&shim_trace_state, memory_order_relaxed))
        shim_trace_put_at(shim_trace_now(), op, r, dev, addr, size);
}

static inline int shim_tracing(void)
{
    return atomic_load_explicit(&shim_trace_state, memory_order_relaxed);
}

/* Opens the trace file named by the pattern (%p = pid) and starts
 * recording. Logs and stays off on failure. */
void shim_trace_open(const char *pattern);

/* Writes every ring's records to the file (helper tick, SIGTERM). */
void shim_trace_drain(void);

/* Drains everything and switches to writing each record at once: for the
 * exit path, after which no thread may be left to drain. */
void shim_trace_finish(void);

/* Stops recording in a forked child (the file is the parent's). */
void shim_trace_after_fork(void);

#endif
