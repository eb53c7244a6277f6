/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jobgate.c - see jobgate.h.
 *
 * Every step asks all ranks at once, then waits for each answer: a
 * resume is a barrier across the ranks, and the others' steps should not
 * wait in turn either. A rank answers a request after publishing its page,
 * so the view read after the answer tells what the step did.
 *
 * Stopping at the same operation: each rank counts the operations issued
 * on each communicator. The controller closes the gates with no targets
 * (every rank stops where it is), reads the counts, and sets each
 * communicator's target to the highest count any rank reached; a rank
 * below goes on until it reaches it. A rank that went past on another
 * communicator meanwhile (a group's start passes while any of its
 * communicators is behind) raises that target in turn, until every count
 * matches or the step's time runs out. Each ask closes again, which also
 * renews the hold after which a gate opens by itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "jobgate.h"
#include "node.h"
#include "userns.h"

/* The views read after each step's answers, one per rank. */
static stats_view views[JOBGATE_RANKS_MAX];

/* Appends a sentence to g->why. */
static void say(jobgate *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(jobgate *g, const char *fmt, ...)
{
    size_t at = strlen(g->why);
    va_list ap;
    va_start(ap, fmt);
    if (at < sizeof(g->why))
        vsnprintf(g->why + at, sizeof(g->why) - at, fmt, ap);
    va_end(ap);
}

static bool has_pid(const jobgate *g, int pid)
{
    for (size_t i = 0; i < g->n; i++)
        if (g->pid[i] == pid)
            return true;
    return false;
}

static int add_id(jobgate *g, uint64_t id)
{
    for (size_t i = 0; i < g->nids; i++)
        if (g->id[i] == id)
            return 0;
    if (g->nids == STATS_MAX_COMMS)
        return -1;
    g->id[g->nids] = id;
    g->target[g->nids++] = 0;
    return 0;
}

/* Whether v lists a communicator of g's. */
static bool shares(const jobgate *g, const stats_view *v)
{
    for (uint32_t k = 0; k < v->ncomms && k < STATS_MAX_COMMS; k++)
        for (size_t i = 0; i < g->nids; i++)
            if (v->comms[k].id == g->id[i])
                return true;
    return false;
}

/* Whether v's process holds communicators its page does not list (past
 * its room, or shrunk or grown: no id every rank computes alike): the gate
 * could set no target for them, its ranks would stop at different counts
 * and their collectives never end. Says so. */
static bool unlisted(jobgate *g, const stats_view *v, int pid)
{
    uint32_t listed = v->ncomms < STATS_MAX_COMMS ? v->ncomms : STATS_MAX_COMMS;
    if (v->proc.nccl_comms <= listed)
        return false;
    say(g, "process %d (a rank of the job) holds %llu NCCL communicators, of which its page "
        "lists %u (more than %d, or made by ncclCommShrink or ncclCommGrow): its ranks "
        "cannot be stopped at the same operation on the others; refused. ", pid,
        (unsigned long long)v->proc.nccl_comms, listed, STATS_MAX_COMMS);
    return true;
}

/* Adds v's process and its communicators: 0, -1 (too many), or -2
 * (communicators not listed, said). */
static int add_rank(jobgate *g, const stats_view *v, int pid)
{
    if (unlisted(g, v, pid))
        return -2;
    if (g->n == JOBGATE_RANKS_MAX)
        return -1;
    g->pid[g->n++] = pid;
    for (uint32_t k = 0; k < v->ncomms && k < STATS_MAX_COMMS; k++)
        if (add_id(g, v->comms[k].id))
            return -1;
    return 0;
}

/* The ranks of the job's processes in communicator id (their pages'
 * entries, at most max of them) into rank, with the size the first of
 * them (the named process's own page, where it lists id) gives: how many
 * entries there are. *nranks is -1 where two pages disagree on the size. */
static size_t ranks_of(const jobgate *g, const stats_view *const *views_of, uint64_t id,
                       int32_t *rank, size_t max, int32_t *nranks)
{
    size_t n = 0;
    *nranks = 0;
    for (size_t r = 0; r < g->n; r++) {
        const stats_view *v = views_of[r];
        for (uint32_t k = 0; k < v->ncomms && k < STATS_MAX_COMMS; k++) {
            if (v->comms[k].id != id)
                continue;
            if (!*nranks)
                *nranks = v->comms[k].nranks;
            else if (*nranks != v->comms[k].nranks)
                *nranks = -1;
            if (n < max)
                rank[n] = v->comms[k].rank;
            n++;
        }
    }
    return n;
}

/* Whether the n ranks hold each of 0..nranks-1 exactly once. */
static bool ranks_whole(const int32_t *rank, size_t n, int32_t nranks)
{
    if (nranks <= 0 || n != (size_t)nranks)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (rank[i] < 0 || rank[i] >= nranks)
            return false;
        for (size_t j = 0; j < i; j++)
            if (rank[j] == rank[i])
                return false;
    }
    return true;
}

/* Says what is wrong with communicator i's ranks here, if anything: 0 if
 * every one of its ranks is here, once. */
static int comm_check(jobgate *g, const stats_view *const *views_of, size_t i)
{
    static int32_t rank[JOBGATE_RANKS_MAX * STATS_MAX_COMMS];
    int32_t nranks;
    size_t n = ranks_of(g, views_of, g->id[i], rank, sizeof(rank) / sizeof(rank[0]), &nranks);
    if (nranks > 0 && n < (size_t)nranks) {
        say(g, "communicator %016llx has %zu of its %d ranks in this user's processes on "
            "this node: the others are on other nodes, or not running, or not under cupool "
            "(a job spanning nodes cannot be paused from one node). ",
            (unsigned long long)g->id[i], n, nranks);
        return 1;
    }
    if (ranks_whole(rank, n, nranks))
        return 0;
    say(g, "communicator %016llx: this user's processes on this node claim %zu ranks "
        "where %s: its processes cannot be told apart. ", (unsigned long long)g->id[i], n,
        nranks < 0 ? "their pages disagree on its size" : "some are claimed twice or out of "
        "its size");
    return 1;
}

/* Adds to g the processes of s of user uid that share a communicator with
 * it, and theirs in turn (views_of[r]: rank r's view); another user's is
 * named in g->ignored and left out. 0, or as add_rank. */
static int job_grow(jobgate *g, const stats_view **views_of, uint32_t uid, const node_scan *s)
{
    int err = 0;
    for (bool grew = true; grew && !err;) {
        grew = false;
        for (size_t p = 0; p < s->nprocs && !err; p++) {
            const node_proc *o = &s->procs[p];
            if (has_pid(g, o->pid) || !shares(g, &o->view))
                continue;
            if (o->uid != uid) {
                bool named = false;
                for (size_t k = 0; k < g->nignored; k++)
                    named |= g->ignored[k] == o->pid;
                if (!named && g->nignored < JOBGATE_RANKS_MAX)
                    g->ignored[g->nignored++] = o->pid;
                continue;
            }
            views_of[g->n] = &o->view;
            err = add_rank(g, &o->view, o->pid);
            grew = true;
        }
    }
    return err;
}

int jobgate_select(jobgate *g, const stats_view *v, uint32_t uid, const node_scan *s)
{
    const stats_view *views_of[JOBGATE_RANKS_MAX + 1];
    views_of[0] = v;
    int err = add_rank(g, v, v->pid);
    if (!err)
        err = job_grow(g, views_of, uid, s);
    if (err == -1)
        say(g, "the job of process %d has more than %d processes or %d communicators on "
            "this node: refused. ", v->pid, JOBGATE_RANKS_MAX, STATS_MAX_COMMS);
    for (size_t i = 0; !err && i < g->nids; i++)
        err = comm_check(g, views_of, i);
    return err ? 1 : 0;
}

/* Takes the job's controller lock: every rank's page, locked (flock)
 * until this process exits. 0, or 1 with why said. */
static int lock_job(jobgate *g)
{
    for (size_t r = 0; r < g->n; r++) {
        int fd = stats_page_lock(g->pid[r]);
        if (fd >= 0) {
            g->lock_fd[g->nlocked++] = fd;
            continue;
        }
        if (fd == -EWOULDBLOCK)
            say(g, "another cupool pause, resume or flush --nccl of this job is under way "
                "(it holds the page of process %d): refused, wait for it. ", g->pid[r]);
        else
            say(g, "cannot lock the page of process %d (a rank of the job: %s): refused. ",
                g->pid[r], strerror(-fd));
        jobgate_unlock(g);
        return 1;
    }
    return 0;
}

void jobgate_unlock(jobgate *g)
{
    for (size_t i = 0; i < g->nlocked; i++)
        close(g->lock_fd[i]);
    g->nlocked = 0;
}

/* Says on stderr which processes of other users claim the job's
 * communicators: they are not of it. */
static void say_ignored(const jobgate *g)
{
    for (size_t k = 0; k < g->nignored; k++)
        fprintf(stderr, "cupool: process %d, another user's, claims a communicator of the job "
                "of process %d: not of it, left alone\n", g->ignored[k], g->pid[0]);
}

int jobgate_find(jobgate *g, const stats_view *v, double timeout)
{
    jobgate_unlock(g); /* a jobgate used again: its locks go first */
    memset(g, 0, sizeof(*g));
    g->timeout = timeout;
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d", v->pid);
    if (stat(path, &st) != 0) {
        say(g, "process %d is gone: ", v->pid);
        return 1;
    }
    node_scan s;
    node_scan_run(&s, NULL, 0);
    int err = jobgate_select(g, v, st.st_uid, &s);
    node_scan_free(&s);
    say_ignored(g);
    if (!err && g->nids)
        err = lock_job(g);
    return err ? 1 : 0;
}

/* Asks rank i for want (with g's targets), or -errno. */
static int ask(jobgate *g, size_t i, uint32_t want, uint64_t *ticket)
{
    static stats_nccl_ask a;
    memset(&a, 0, sizeof(a));
    a.want = want;
    a.ntargets = (uint32_t)g->nids;
    a.hold_s = (uint32_t)(g->timeout * 2 + 5);
    memcpy(a.id, g->id, sizeof(a.id));
    memcpy(a.target, g->target, sizeof(a.target));
    return stats_page_ask_nccl(g->pid[i], &a, ticket);
}

/* Asks the ranks picked (pick NULL: all) for want, waits for every answer
 * and reads each view: 0, or -1 with the first rank that failed said. A
 * rank's own refusal is its view's gate.error, for the caller to judge. */
static int ask_all(jobgate *g, uint32_t want, const bool *pick, const char *what)
{
    uint64_t ticket[JOBGATE_RANKS_MAX];
    bool done[JOBGATE_RANKS_MAX];
    int bad = -1, err = 0;
    for (size_t i = 0; i < g->n; i++) {
        done[i] = pick && !pick[i];
        if (!done[i] && (err = ask(g, i, want, &ticket[i])) != 0 && bad < 0)
            bad = (int)i;
        done[i] |= err != 0;
    }
    double until = clock_mono_s() + g->timeout;
    for (size_t left = g->n; left && bad < 0;) {
        left = 0;
        for (size_t i = 0; i < g->n && bad < 0; i++) {
            if (done[i])
                continue;
            int got = stats_page_answered(g->pid[i], STATS_REQ_NCCL, ticket[i]);
            if (got > 0 && (err = stats_page_read(g->pid[i], &views[i])) == 0)
                done[i] = true;
            else if (got < 0)
                err = got, bad = (int)i;
            left += !done[i];
        }
        if (left && clock_mono_s() > until)
            for (size_t i = 0; i < g->n && bad < 0; i++)
                if (!done[i])
                    err = -ETIMEDOUT, bad = (int)i;
        if (left && bad < 0)
            nanosleep(&(struct timespec){0, 5000000L}, NULL);
    }
    if (bad < 0)
        return 0;
    say(g, "process %d did not %s: %s. ", g->pid[bad], what,
        err == -ETIMEDOUT ? "no answer in time" : strerror(-err));
    return -1;
}

/* The highest count any rank reached on communicator i. */
static uint64_t highest(const jobgate *g, uint64_t id)
{
    uint64_t top = 0;
    for (size_t r = 0; r < g->n; r++)
        for (uint32_t k = 0; k < views[r].ncomms && k < STATS_MAX_COMMS; k++)
            if (views[r].comms[k].id == id && views[r].comms[k].issued > top)
                top = views[r].comms[k].issued;
    return top;
}

/* Whether rank r is stopped at the targets; if not, says why into buf. */
static bool stopped(const jobgate *g, size_t r, char *buf, size_t len)
{
    const stats_view *v = &views[r];
    if (v->gate.state != STATS_GATE_CLOSED || v->gate.active) {
        snprintf(buf, len, "process %d: %u threads inside NCCL calls or groups",
                 g->pid[r], v->gate.active);
        return false;
    }
    for (uint32_t k = 0; k < v->ncomms && k < STATS_MAX_COMMS; k++)
        for (size_t i = 0; i < g->nids; i++)
            if (v->comms[k].id == g->id[i] && v->comms[k].issued != g->target[i]) {
                snprintf(buf, len, "process %d: communicator %016llx at operation %llu of "
                         "the others' %llu", g->pid[r], (unsigned long long)g->id[i],
                         (unsigned long long)v->comms[k].issued,
                         (unsigned long long)g->target[i]);
                return false;
            }
    return true;
}

int jobgate_stop(jobgate *g)
{
    double until = clock_mono_s() + g->timeout;
    char lag[160] = "";
    for (;;) {
        if (ask_all(g, STATS_NCCL_CLOSE, NULL, "close its NCCL gate")) {
            jobgate_release(g, true);
            return 1;
        }
        bool all = true, moved = false;
        for (size_t i = 0; i < g->nids; i++) {
            uint64_t top = highest(g, g->id[i]);
            moved |= top != g->target[i];
            g->target[i] = top;
        }
        for (size_t r = 0; r < g->n && all && !moved; r++)
            all = stopped(g, r, lag, sizeof(lag));
        if (all && !moved)
            return 0;
        if (clock_mono_s() > until) {
            say(g, "the job's ranks did not stop at the same NCCL operation within %.0f s "
                "(%s). ", g->timeout, lag[0] ? lag : "the counts kept moving");
            jobgate_release(g, true);
            return 1;
        }
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
}

int jobgate_suspend(jobgate *g)
{
    int bad = ask_all(g, STATS_NCCL_SUSPEND, NULL, "answer the suspend of its communicators");
    for (size_t r = 0; r < g->n; r++) {
        /* Every rank may hold suspended communicators, a refusing one and
         * one that did not answer in time included: on a failure all are
         * asked to resume, together (a rank with none answers at once). */
        g->suspended[r] = true;
        g->freed[r] = views[r].gate.freed;
        if (bad == 0 && views[r].gate.error) {
            char why[sizeof(views[r].gate.why) + 1];
            snprintf(why, sizeof(why), "%s", views[r].gate.why);
            say(g, "process %d could not suspend its NCCL communicators: %s. ", g->pid[r],
                why);
            bad = 1;
        }
    }
    if (!bad)
        return 0;
    jobgate_release(g, false);
    return 1;
}

uint64_t jobgate_freed(const jobgate *g)
{
    uint64_t sum = 0;
    for (size_t r = 0; r < g->n && sum != STATS_UNKNOWN; r++)
        sum = g->freed[r] == STATS_UNKNOWN ? STATS_UNKNOWN : sum + g->freed[r];
    return sum;
}

int jobgate_release(jobgate *g, bool only_open)
{
    int bad = 0;
    bool any = false;
    for (size_t r = 0; r < g->n; r++)
        any |= g->suspended[r];
    if (!only_open && any) {
        bad = ask_all(g, STATS_NCCL_RESUME, g->suspended, "resume its communicators");
        for (size_t r = 0; r < g->n && !bad; r++)
            if (g->suspended[r] && views[r].gate.error) {
                char why[sizeof(views[r].gate.why) + 1];
                snprintf(why, sizeof(why), "%s", views[r].gate.why);
                say(g, "process %d could not resume its NCCL communicators (%s): they "
                    "resume at its next NCCL call. ", g->pid[r], why);
                bad = -1;
            }
        for (size_t r = 0; r < g->n; r++)
            g->suspended[r] = false;
    }
    if (ask_all(g, STATS_NCCL_OPEN, NULL, "open its NCCL gate"))
        bad = -1;
    return bad ? 1 : 0;
}

/* Every rank is this user's (or the caller root) and its NCCL can
 * suspend: 0, or 1 with why said. */
static int ranks_ready(jobgate *g)
{
    for (size_t r = 0; r < g->n; r++) {
        uint32_t owner;
        userns_whose w = userns_process_whose(g->pid[r], &owner);
        if (w != USERNS_MINE && !userns_caller_is_root()) {
            say(g, "process %d (a rank of the job) is %s: refused, nothing done",
                g->pid[r], w == USERNS_GONE ? "gone" : "another user's");
            return 1;
        }
        if (stats_page_read(g->pid[r], &views[r]) || !views[r].gate.can_suspend) {
            say(g, "process %d (a rank of the job) has no NCCL with ncclCommSuspend (2.29.7 "
                "or later) or no page to ask: nothing done", g->pid[r]);
            return 1;
        }
        if (views[r].proc.paused_since) {
            say(g, "process %d (a rank of the job) is paused (cupool pause): cupool resume "
                "it first; nothing done", g->pid[r]);
            return 1;
        }
    }
    return 0;
}

void jobgate_signals_block(sigset_t *old)
{
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    sigaddset(&stop, SIGQUIT);
    sigprocmask(SIG_BLOCK, &stop, old);
}

int jobgate_suspend_idle(jobgate *g, const stats_view *v, double timeout)
{
    if (jobgate_find(g, v, timeout)) {
        say(g, "nothing done");
        return 1;
    }
    if (ranks_ready(g) || jobgate_stop(g) || jobgate_suspend(g))
        return 1;
    return jobgate_release(g, true);
}
