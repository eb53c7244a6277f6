/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job.h - the NCCL communicators this process holds, so that a multi-GPU
 * job can be seen from outside as one unit (cupool job): each with an id
 * that every rank of its job computes alike, its rank, size and device,
 * and the device memory NCCL says it holds.
 *
 * comm.c's wrappers of the calls that make and end communicators tell this
 * module (it calls nothing of comm.c's). Ids: a communicator made from an
 * ncclUniqueId is named by a 64-bit FNV-1a hash of its 128 bytes, which
 * every rank was handed; a split's child by a hash of its parent's id, how
 * many splits of that parent came before (a split is collective: every
 * rank of the parent makes the same ones, in the same order) and its
 * color, which all ranks of the child share (the key differs per rank, so
 * it is left out). ncclCommInitAll makes all its ranks in this process
 * from an id it never shows: they are named by a hash of this process's
 * pid, the time and a count.
 *
 * Memory: where NCCL has ncclCommMemStats (2.29.7 on) the helper thread
 * asks it for each communicator (shim_job_refresh); where it has not, or
 * refuses, the figures are STATS_UNKNOWN.
 */
#ifndef CUPOOL_SHIM_JOB_H
#define CUPOOL_SHIM_JOB_H

#include <stddef.h>
#include <stdint.h>

#include "stats.h"

/* The 64-bit FNV-1a hash of n bytes at p, continuing from h (start with
 * SHIM_JOB_FNV_BASIS). */
#define SHIM_JOB_FNV_BASIS 0xcbf29ce484222325ull
uint64_t shim_job_hash(uint64_t h, const void *p, size_t n);

/* comm was made as rank of nranks, named id. Its device is asked of NCCL
 * (ncclCommCuDevice; -1 if it cannot tell). */
void shim_job_made(void *comm, uint64_t id, int rank, int nranks);

/* ncclCommInitAll made comms[0..n): rank i of n each, one new id. */
void shim_job_made_all(void *const *comms, int n);

/* parent was split (every rank of parent calls this, child NULL for a rank
 * with no color): child, if any, is recorded with its rank and size as
 * NCCL tells (ncclCommUserRank, ncclCommCount). */
void shim_job_split(void *parent, int color, void *child);

/* comm is about to be destroyed or aborted: it is forgotten before NCCL
 * frees it, so that no query of the helper thread touches it after. */
void shim_job_gone(void *comm);

/* Asks NCCL what each communicator holds (ncclCommMemStats). Helper thread
 * only, when a reader asks (cupool stat, a dump), never on the publishing
 * tick: never under a lock of the program's threads' paths but this
 * module's own. */
void shim_job_refresh(void);

/* What the communicators on device dev hold, and could give back when
 * suspended, as last refreshed: 0 with none there, STATS_UNKNOWN when NCCL
 * cannot tell for one of them. */
void shim_job_memory(int dev, uint64_t *held, uint64_t *suspendable);

/* Copies up to max communicators into out; returns how many. */
uint32_t shim_job_list(stats_comm *out, uint32_t max);

#endif
