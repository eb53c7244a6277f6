/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jobgate.h - the controller's side of the NCCL gate (stats.h's
 * STATS_REQ_NCCL): finds a job's ranks on this node, stops them all at the
 * same operation on every communicator, suspends their communicators,
 * resumes them and opens the gates again (cupool pause of a job, cupool
 * flush --nccl). Nothing is left half done: a function that fails has
 * already brought every rank back to where it was before it (the
 * communicators it suspended resumed, the gates it closed open), and
 * says which rank (pid) failed and why in g->why.
 */
#ifndef CUPOOL_STATS_JOBGATE_H
#define CUPOOL_STATS_JOBGATE_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node.h"
#include "stats.h"

enum { JOBGATE_RANKS_MAX = 64 };

typedef struct jobgate {
    size_t n;                        /* processes of the job on this node */
    int pid[JOBGATE_RANKS_MAX];      /* the first is the one named */
    bool suspended[JOBGATE_RANKS_MAX]; /* its communicators, by this controller */
    uint64_t freed[JOBGATE_RANKS_MAX]; /* what their suspend gave back */
    size_t nids;                     /* communicators of the job */
    uint64_t id[STATS_MAX_COMMS], target[STATS_MAX_COMMS];
    double timeout;                  /* seconds for each step */
    int lock_fd[JOBGATE_RANKS_MAX];  /* the ranks' pages, locked (flock) */
    size_t nlocked;
    int ignored[JOBGATE_RANKS_MAX];  /* other users' processes claiming its
                                        communicators: left out */
    size_t nignored;
    char why[512];                   /* the last failure, whole sentences */
} jobgate;

/* The job of the process whose view is v (of user uid, as the reader sees
 * it), from the node's processes s: v's process, the processes of user
 * uid whose pages share a communicator with it, and theirs in turn.
 * Another user's process claiming one of its communicators is not of it:
 * left out and named in g->ignored. The job is taken whole or not at all:
 * 1 with why said unless every communicator's ranks, as many as the first
 * page listing it says (v's own, where it lists it), are each held once
 * by these processes: none on another node, missing, not under cupool,
 * claimed twice or out of range, and the pages agree on the size. 1 too
 * for a rank holding communicators its page does not list, or more
 * processes or communicators than fit. Takes no lock. */
int jobgate_select(jobgate *g, const stats_view *v, uint32_t uid, const node_scan *s);

/* Scans the node and selects v's job (jobgate_select: another user's
 * process claiming its communicators is named on stderr), then takes the
 * job's controller lock: every rank's page, flock'd until this process
 * exits or jobgate_unlock (cupool pause, resume, flush --nccl each hold it;
 * a page is in a directory only its user may write in, so no other user
 * can take or squat it). 0, or 1 with why said (another controller of the
 * job acting on it now, or no job as above). */
int jobgate_find(jobgate *g, const stats_view *v, double timeout);

/* Lets go of the job's controller lock. */
void jobgate_unlock(jobgate *g);

/* Closes every rank's gate and lets those behind catch up until all stop
 * at the same count of operations on every communicator, none inside
 * NCCL. 0, or 1 (gates opened again, why said). */
int jobgate_stop(jobgate *g);

/* With every rank stopped: suspends every rank's communicators. 0, or 1
 * (those suspended resumed, gates opened, why said). */
int jobgate_suspend(jobgate *g);

/* Resumes every rank's communicators (all asked at once: a resume is a
 * barrier across them), then opens every gate; with only_open, opens the
 * gates alone (a communicator still suspended resumes at its rank's next
 * call on it). 0, or 1 with why said (the gates open all the same). */
int jobgate_release(jobgate *g, bool only_open);

/* What the last suspend gave back, all ranks together (STATS_UNKNOWN if
 * NCCL could not tell for one). */
uint64_t jobgate_freed(const jobgate *g);

/* cupool flush --nccl: finds v's job, checks that every rank is this
 * user's (root: anyone's) and its NCCL can suspend, stops the ranks,
 * suspends their communicators and opens the gates again (each
 * communicator resumes at its rank's next NCCL call on it). 0, or 1 with
 * nothing left suspended and why said. */
int jobgate_suspend_idle(jobgate *g, const stats_view *v, double timeout);

/* Blocks the signals that would stop a controller halfway, its ranks left
 * held with nothing said (*old: the mask to put back). */
void jobgate_signals_block(sigset_t *old);

#endif
