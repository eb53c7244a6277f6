/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pause.h - cupool-pause's parts: the one-process steps (pause.c) that
 * the pause of a whole NCCL job (job.c) repeats per rank. Each returns 0,
 * or 1 with what happened said on stderr (pause_say), the process's state
 * included.
 */
#ifndef CUPOOL_PAUSE_H
#define CUPOOL_PAUSE_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "say.h"
#include "stats.h"

/* The driver's calls cupool-pause makes, from libcuda.so.1. */
typedef struct pause_driver {
    CUresult (*init)(unsigned int);
    CUresult (*state)(int, CUprocessState *);
    CUresult (*lock)(int, CUcheckpointLockArgs *);
    CUresult (*checkpoint)(int, CUcheckpointCheckpointArgs *);
    CUresult (*restore)(int, CUcheckpointRestoreArgs *);
    CUresult (*unlock)(int, CUcheckpointUnlockArgs *);
    CUresult (*error_string)(CUresult, const char **);
} pause_driver;
extern pause_driver pause_drv;

/* "cupool: " and the line, on stderr. */
const char *pause_cu_text(CUresult r);

/* Loads the driver's checkpoint calls. */
int pause_driver_load(void);
/* pid exists and is this user's (as the initial user namespace sees it). */
int pause_owner_check(int pid);
/* The driver's state of pid into *s. */
int pause_state_of(int pid, CUprocessState *s);
/* What pid's page says it holds on its devices. */
uint64_t pause_held_of(const stats_view *v);
/* Flushes pid through its page (*v its view after). */
int pause_flush(int pid, double timeout, stats_view *v);
/* Lock and checkpoint; a failed checkpoint is unlocked. */
int pause_lock_and_checkpoint(int pid, double *t_lock, double *t_ckpt);
/* Takes flushed pid's device memory away (v: its view): where move, cupool
 * moves its VMM segments to host memory (it says so, and why not where it
 * cannot), then the driver checkpoints the rest; where cupool did not move
 * them, the driver checkpoints everything. *moved says which; a moved
 * process's page says paused, and what was done is printed. 0, or 1 with
 * why said and pid running on. */
int pause_away(int pid, stats_view *v, bool move, bool *moved, double *t_lock, double *t_ckpt);
/* Pauses one process that holds no NCCL communicator: flushes its caches
 * through its page (unless no_flush), has cupool move its VMM segments to
 * host memory (unless no_move or no_flush), then the driver's lock and
 * checkpoint of the rest; its page says paused. 0, or 1 with the reason
 * said. */
int pause_one(int pid, double timeout, bool no_flush, bool no_move);
/* Restore (when checkpointed) and unlock; the page says running. */
int pause_resume_one(int pid);

/* The pause and the resume of pid's whole NCCL job (v: pid's view): each
 * rank as pause_one, once every communicator is suspended. */
int pause_job(const stats_view *v, double timeout, bool no_flush, bool no_move);
int pause_job_resume(const stats_view *v, double timeout);

#endif
