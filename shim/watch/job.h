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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gate.h" /* the wrappers that count operations pass the gate */
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

/* comm was made by a call whose id the ranks cannot compute alike
 * (ncclCommShrink, ncclCommGrow): counted in nccl_comms, not listed, so
 * that a controller sees that it cannot set the gate's target for it. */
void shim_job_unnamed(void *comm);

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

/* ---- suspending (cupool pause of a job, cupool flush --nccl) ------------
 * Each communicator counts the operations the program issued on it (a
 * collective or a point-to-point call, in a group or not), so that a
 * controller can stop every rank at the same one (gate.h). Those below are
 * NCCL results: 0, or ncclResult_t's code. */

/* An operation on comm is about to be issued: counted. */
void shim_job_issue(void *comm);

/* At an outermost NCCL call (a collective outside any group, a group's
 * outermost start; never inside a group): the communicators cupool left
 * suspended (cupool flush --nccl), if any, are resumed, all together (a
 * barrier with their other ranks, which come to their own next call).
 * Costs one atomic load when none is. 0, or the resume's failure (said in
 * the log): they stay suspended, and the call is not made. */
int shim_job_resume_lazy(void);

/* Whether comm (NULL: any communicator) is below its target: ids[i]'s
 * target is targets[i]; one not named has none (it is not below). */
bool shim_job_behind(void *comm, const uint64_t *ids, const uint64_t *targets, size_t n);

/* Whether this NCCL has ncclCommSuspend and ncclCommResume (2.29.7 on). */
bool shim_job_can_suspend(void);

/* The devices of the communicators, a bit each (those NCCL could not
 * tell: bit 63). */
uint64_t shim_job_devices(void);

/* Suspends every communicator not suspended (NCCL_SUSPEND_MEM), all or
 * none: one refused, those suspended here are resumed again. 0 with
 * *freed the bytes NCCL said they would give back (STATS_UNKNOWN if it
 * cannot tell), or NCCL's result with why said (bufsize len). */
int shim_job_suspend_all(uint64_t *freed, char *why, size_t len);

/* Resumes every communicator cupool suspended, together (one NCCL group,
 * in the order of their ids): 0, or the failure's NCCL result with why
 * said; then they stay suspended (resumed at the program's next call). */
int shim_job_resume_all(char *why, size_t len);

#endif
