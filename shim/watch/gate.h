/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gate.h - the NCCL gate: lets a controller from outside (cupool pause of
 * a job, cupool flush --nccl) stop every rank of a job at the same NCCL
 * operation on every communicator, so that the communicators can be
 * suspended with nothing outstanding.
 *
 * comm.c's wrappers pass the gate at the points outside any group: an
 * outermost ncclGroupStart, and a collective or point-to-point call
 * outside a group; never in the middle of a group, whose calls NCCL queues
 * together at its end. While the gate is closed a thread arriving there
 * waits, unless its communicator (a group's start: any communicator) is
 * below the target the controller set for it: a rank behind the others
 * goes on to the operation they stopped at (job.h counts them), else the
 * ranks ahead would wait on the GPU forever for its part of one. A closed
 * gate opens by itself once its hold runs out, unless the communicators
 * were suspended since: a controller that died leaves no job stuck before
 * it suspended anything.
 *
 * The threads past the gate are counted, so that the helper thread knows
 * when none is inside NCCL: the gate itself costs one atomic increment and
 * load on the way in while it is open, one decrement on the way out. The
 * wrappers add job.h's per call: an atomic load (any communicator left
 * suspended?) at the outermost call, and shim_job_issue on every
 * collective, a mutex taken and a walk of the communicators' table to
 * count it.
 */
#ifndef CUPOOL_SHIM_GATE_H
#define CUPOOL_SHIM_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stats.h"

/* Whether comm (NULL: any communicator) is below its target (ids[i]'s
 * target is targets[i]): job.h's shim_job_behind. */
typedef bool (*shim_gate_behind)(void *comm, const uint64_t *ids, const uint64_t *targets,
                                 size_t n);

/* A thread at an outermost NCCL call on comm (NULL: a group's start)
 * passes the gate, waiting while it is closed to it and comm is not
 * behind. */
void shim_gate_enter(void *comm, shim_gate_behind behind);
/* ... and leaves its outermost call or group. */
void shim_gate_leave(void);

/* Closes the gate (again: new targets), ids[i]'s target targets[i], to
 * open by itself in hold_s seconds unless held. Helper thread. */
void shim_gate_close(const uint64_t *ids, const uint64_t *targets, size_t n, uint32_t hold_s);
/* Before a suspend: holds the gate closed until opened (no opening by
 * itself), if it is closed, its hold not run out, and no thread is past
 * it (one counting itself in a moment is waited for, up to 0.1 s). Whether
 * it held. */
bool shim_gate_try_hold(void);
/* The suspend failed: the gate opens by itself again once its hold runs
 * out. */
void shim_gate_unhold(void);
/* Opens the gate: every thread waiting goes on. */
void shim_gate_open(void);

/* The gate's state, active and waiting into g (the rest untouched); a
 * gate whose hold ran out opens first. Helper thread. */
void shim_gate_view(stats_gate *g);

#endif
