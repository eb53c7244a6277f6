/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cudagate.h - the CUDA gate: stops the program's threads at the entry of
 * their CUDA calls while cupool moves the program's device memory away and
 * back (cupool pause and resume, process/park.h), so that no GPU work
 * touches an address whose memory is gone.
 *
 * A thread passes it at two kinds of entries: CUPTI's callback at the
 * entry of each driver call that may give the GPU work (cupti.c: every
 * call but the quiet ones that only ask, create, record or wait), and the
 * shim's own allocation entries (shim_serve, shim_free_pooled), before any
 * of cupool's locks is taken. It leaves at the call's return. Calls cupool
 * makes inside its own entries pass without counting (shim_inside), as do
 * the threads that move the memory (shim_cudagate_exempt).
 *
 * The open gate costs an atomic increment and load on the way in, a
 * decrement on the way out. A closed gate waits on a condition variable.
 * A thread inside a call when the gate closes is counted (active); the
 * mover waits until none is, up to a deadline, and refuses after it.
 *
 * Calls that began before CUPTI watched are not counted: one that returns
 * while the gate is closed is (strays), and the mover refuses to release
 * memory when one returned after it began waiting for the devices' work
 * (its work may have been queued after that wait). Having just started
 * CUPTI, the mover lets such calls end first (50 ms).
 */
#ifndef CUPOOL_SHIM_CUDAGATE_H
#define CUPOOL_SHIM_CUDAGATE_H

#include <stdbool.h>
#include <stdint.h>

/* A program thread enters a CUDA call (waits while the gate is closed),
 * and leaves it. Nested entries on one thread count once; a return whose
 * entry was not seen (CUPTI began watching during the call) is counted in
 * strays while the gate is closed. */
void shim_cudagate_enter(void);
void shim_cudagate_leave(void);

/* This thread passes the gate (the mover and its copy threads). */
void shim_cudagate_exempt(bool on);

/* Closes the gate: threads arriving wait. */
void shim_cudagate_close(void);
/* Waits up to ms milliseconds until no thread is inside a call past the
 * gate: true once none is; false with *inside the count after the wait. */
bool shim_cudagate_quiet(unsigned ms, unsigned *inside);
/* Opens the gate: every thread waiting goes on. */
void shim_cudagate_open(void);
/* Strays counted since the gate closed: calls that entered before CUPTI
 * watched and left while it was closed. */
uint64_t shim_cudagate_strays(void);

#endif
