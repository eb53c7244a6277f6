/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job.c - cupool pause and resume of a whole NCCL job (pause.h): every
 * rank of it on this node, found the way cupool job finds them.
 *
 *   pause   refuse before touching anything: ranks on other nodes,
 *           another user's rank, an NCCL without ncclCommSuspend, a rank
 *           not running. Then stop every rank at the same NCCL operation,
 *           suspend every communicator, flush every rank, lock and
 *           checkpoint each rank in turn.
 *   resume  restore and unlock every rank, then resume the communicators
 *           (a barrier across the ranks) and open the gates.
 *
 * A rank that fails brings the others back: those checkpointed are
 * restored and unlocked, the communicators resumed, the gates opened; the
 * message names the rank (its pid) and why. Signals wait from the first
 * gate closed to the last line said.
 */
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "jobgate.h"
#include "pause.h"

static jobgate g;
static stats_view views[JOBGATE_RANKS_MAX];

/* The job's ranks are this user's, and their views read: 0, or 1 said.
 * (jobgate_select takes only processes of the named process's user, which
 * main.c checked is this user's: the owner check is a second line.) */
static int ranks_check(void)
{
    for (size_t r = 0; r < g.n; r++) {
        if (pause_owner_check(g.pid[r]))
            return 1;
        if (stats_page_read(g.pid[r], &views[r])) {
            pause_say("the page of process %d (a rank of the job) cannot be read: nothing "
                      "done", g.pid[r]);
            return 1;
        }
    }
    return 0;
}

/* Finds the job of v's process and checks it: 0, or 1 said. */
static int job_find(const stats_view *v, double timeout)
{
    if (jobgate_find(&g, v, timeout)) {
        pause_say("%snothing done", g.why);
        return 1;
    }
    return ranks_check();
}

/* Every rank's NCCL can suspend and every rank runs: 0, or 1 said. */
static int pause_check_ranks(void)
{
    for (size_t r = 0; r < g.n; r++)
        if (!views[r].gate.can_suspend) {
            pause_say("the NCCL in process %d has no ncclCommSuspend (NCCL 2.29.7 or later "
                      "has it; PyTorch 2.11's wheels ship 2.28.9): its job cannot be paused, "
                      "nothing done", g.pid[r]);
            return 1;
        }
    if (pause_driver_load())
        return 1;
    for (size_t r = 0; r < g.n; r++) {
        CUprocessState st;
        if (pause_state_of(g.pid[r], &st))
            return 1;
        if (st != CU_PROCESS_STATE_RUNNING) {
            pause_say("process %d (a rank of the job) is not running (driver state %d): "
                      "cupool resume %d brings the job back; nothing done", g.pid[r],
                      (int)st, g.pid[r]);
            return 1;
        }
    }
    return 0;
}

/* Appends to buf (room len) what became of rank r: ckpt ranks were
 * checkpointed, k failed, back[r] whether r was brought back. */
static void undo_say_rank(char *buf, size_t len, size_t r, size_t k, size_t ckpt,
                          const bool *back)
{
    size_t at = strlen(buf);
    const char *what = r == k ? "left running (its step failed, said above)" :
                       r >= ckpt ? "never locked, runs on" :
                       back[r] ? "restored and unlocked" :
                                 "still paused, said above (cupool resume tries again)";
    if (at < len)
        snprintf(buf + at, len - at, "%sprocess %d %s", at ? ", " : "", g.pid[r], what);
}

/* Rank k failed step; the ranks before ckpt were checkpointed (ckpt <= k):
 * they alone are restored and unlocked, then the communicators resumed
 * and the gates opened; says what each rank is left as. Returns 1. */
static int pause_undo(size_t k, size_t ckpt, const char *step)
{
    bool back[JOBGATE_RANKS_MAX];
    for (size_t r = 0; r < ckpt; r++)
        back[r] = pause_resume_one(g.pid[r]) == 0;
    char ranks[1024] = "";
    for (size_t r = 0; r < g.n; r++)
        undo_say_rank(ranks, sizeof(ranks), r, k, ckpt, back);
    g.why[0] = '\0';
    int comms = jobgate_release(&g, false);
    pause_say("the job was not paused: process %d (a rank of it) %s; %s; %s%s", g.pid[k], step,
              ranks, comms ? "and: " : "the communicators resumed and the gates open",
              comms ? g.why : "");
    return 1;
}

/* The job's communicators are suspended: flushes each rank (unless
 * no_flush), then takes its memory away (pause_away: cupool's move unless
 * no_move, then the driver's checkpoint). 0, or 1 with everything brought
 * back. */
static int pause_ranks(double timeout, bool no_flush, bool no_move, uint64_t *needs)
{
    for (size_t r = 0; r < g.n; r++) {
        if (!no_flush && pause_flush(g.pid[r], timeout, &views[r]))
            return pause_undo(r, 0, "could not be flushed");
        needs[r] = pause_held_of(&views[r]);
    }
    for (size_t r = 0; r < g.n; r++) {
        double t_lock, t_ckpt;
        bool moved;
        if (pause_away(g.pid[r], &views[r], !no_flush && !no_move, &moved, &t_lock, &t_ckpt))
            return pause_undo(r, r, "could not be checkpointed (said above)");
        if (!moved)
            printf("paused %d: lock %.3f s, checkpoint %.3f s\n", g.pid[r], t_lock, t_ckpt);
    }
    return 0;
}

int pause_job(const stats_view *v, double timeout, bool no_flush, bool no_move)
{
    if (job_find(v, timeout) || pause_check_ranks())
        return 1;
    sigset_t old;
    jobgate_signals_block(&old);
    double t0 = clock_mono_s();
    int rc = 1;
    uint64_t needs[JOBGATE_RANKS_MAX];
    if (jobgate_stop(&g)) {
        pause_say("%sthe job was not paused: its gates are open again, nothing else done",
                  g.why);
    } else if (jobgate_suspend(&g)) {
        pause_say("%sthe job was not paused: its communicators are resumed and its gates "
                  "open", g.why);
    } else if (pause_ranks(timeout, no_flush, no_move, needs) == 0) {
        char b[32], f[32];
        uint64_t held = 0;
        for (size_t r = 0; r < g.n; r++) {
            held += needs[r];
            stats_page_mark_paused(g.pid[r], clock_unix_ns(), needs[r] ? needs[r] : 1);
        }
        fflush(stderr);
        printf("paused the NCCL job of %d: %zu process%s on this node in %.3f s, its %zu "
               "communicator%s suspended first (NCCL gave back %s); they held %s on the "
               "device\n", g.pid[0], g.n, g.n == 1 ? "" : "es", clock_mono_s() - t0, g.nids,
               g.nids == 1 ? "" : "s", stats_fmt_bytes(jobgate_freed(&g), f, sizeof(f)),
               stats_fmt_bytes(held, b, sizeof(b)));
        rc = 0;
    }
    fflush(stdout);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int pause_job_resume(const stats_view *v, double timeout)
{
    if (job_find(v, timeout) || pause_driver_load())
        return 1;
    sigset_t old;
    jobgate_signals_block(&old);
    int rc = 0;
    for (size_t r = 0; r < g.n && !rc; r++) {
        /* A rank cupool moved alone (the driver refused its lock: CUPTI
         * watches it) runs as far as the driver knows, its memory away and
         * its calls held: its page says so. */
        CUprocessState st;
        stats_view rv;
        bool parked = stats_page_read(g.pid[r], &rv) == 0 && rv.park.state == STATS_PARK_PARKED;
        if (pause_state_of(g.pid[r], &st))
            rc = 1;
        else if (st != CU_PROCESS_STATE_RUNNING || parked)
            rc = pause_resume_one(g.pid[r]);
        if (rc)
            pause_say("the job's communicators stay suspended and its gates closed until "
                      "every rank runs again (cupool resume %d tries again)", v->pid);
    }
    for (size_t r = 0; r < g.n && !rc; r++) {
        stats_page_read(g.pid[r], &views[r]);
        for (uint32_t k = 0; k < views[r].ncomms && k < STATS_MAX_COMMS; k++)
            g.suspended[r] |= views[r].comms[k].suspended != 0;
    }
    if (!rc && jobgate_release(&g, false)) {
        pause_say("%sthe job runs, its gates open", g.why);
        rc = 1;
    }
    if (!rc)
        printf("resumed the NCCL job of %d: %zu process%s, communicators resumed\n",
               v->pid, g.n, g.n == 1 ? "" : "es");
    fflush(stdout);
    sigprocmask(SIG_SETMASK, &old, NULL);
    return rc;
}
