/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupti.h - CUPOOL_CUPTI: counting, through CUPTI's callbacks, the driver
 * calls that may give the GPU work, so that a fence can be skipped when no
 * work was submitted since the last one.
 *
 * A block freed now can only be in use by work submitted before its free.
 * If no such work was submitted after the device's last fence was issued,
 * that fence already orders it, and a new one would order nothing more.
 * Every driver call counts as work except a fixed list of calls that only
 * ask, create, record or wait (quiet_calls in cupti.c): an unknown call
 * counts, so the count can only err on the side of fencing. A call counts
 * when it returns, that is once its work is in the driver's queues.
 *
 * CUPTI takes one subscriber per process, and profilers (Nsight Systems,
 * torch.profiler) need it too. CUPOOL_CUPTI=1 watches from the first pool
 * on; auto (the default) once fences come often after the program's first
 * NCCL call, where streams that NCCL keeps busy make the knowledge worth
 * most (below); and when the
 * program subscribes to CUPTI itself, cupool lets go (the program's
 * profiler gets CUPTI) and fences as without it from then on. When CUPTI
 * cannot be loaded or is taken, the shim says so once and fences as always.
 */
#ifndef CUPOOL_SHIM_CUPTI_H
#define CUPOOL_SHIM_CUPTI_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Starts watching, once per process, if CUPOOL_CUPTI asks for it. Must be
 * called before a pool hands out its first block, so that all work that
 * can touch a pooled block is counted. Returns whether watching. */
bool shim_work_watch(void);

/* Under CUPOOL_CUPTI=auto, watching starts (once per process) once
 * SHIM_WORK_AUTO_FENCES fences were issued after the program's first NCCL
 * call: a job whose NCCL streams are busy while it frees and reuses memory
 * (data parallel training) gains from it, while a program that only
 * communicates (nccl-tests) would pay CUPTI's cost on every launch for
 * nothing. shim_work_nccl_call: an NCCL call is under way (and starts
 * watching if due). shim_work_fence_due counts a fence about to be issued
 * (under a pool's lock: it only counts). shim_work_start_due starts
 * watching if due; called where the thread holds none of cupool's locks
 * (an allocation's entry, an NCCL call), as loading CUPTI takes the
 * loader's lock. */
#define SHIM_WORK_AUTO_FENCES 8
void shim_work_nccl_call(void);
void shim_work_fence_due(void);
void shim_work_start_due(void);

/* Starts watching now, whatever CUPOOL_CUPTI=auto waits for, for the
 * CUDA gate (cudagate.h), which stops calls through CUPTI's callback.
 * Whether watching; false with *why in words (CUPOOL_CUPTI=0, CUPTI
 * missing or the program's). */
bool shim_work_watch_gate(const char **why);

/* Whether watching now (after shim_work_watch). Acquire, read before any
 * decision that relies on the count: false once the program took CUPTI. */
bool shim_work_watching(void);

/* Driver calls counted so far. Acquire: the work of every call counted is
 * in the driver's queues before anything the caller issues next. */
uint64_t shim_work_count(void);

/* What cupool's dlsym answers for name on a handle whose own is f: its
 * cuptiSubscribe and cuptiSubscribe_v2 (which hand CUPTI to the program),
 * else f. */
void *shim_cupti_answer(const char *name, void *f);

/* What cupool exports of CUPTI's names (test_shim checks the list). */
#define SHIM_CUPTI_EXPORTS(X) X(cuptiSubscribe) X(cuptiSubscribe_v2)

/* What no count ever equals: the fence of a device that never fenced. */
#define SHIM_WORK_NEVER UINT64_MAX

#endif
