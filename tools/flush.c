/* SPDX-License-Identifier: Apache-2.0 */
/*
 * flush.c - cupool flush and cupool dump: asks one process, through its
 * page (no signal), to return its cached memory or write its statistics,
 * and waits for the answer; flush --nccl suspends the communicators of
 * the process's whole NCCL job first (jobgate.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "jobgate.h"
#include "reader.h"
#include "commands.h"

const args_cmd flush_cmd = {
    "cupool", "flush",
    "usage: cupool flush [--timeout SECONDS] [--nccl] PID\n"
    "Makes PID return its cached memory to the driver, through its live\n"
    "page (no signal), and prints the bytes returned. --nccl: first\n"
    "suspends the communicators of PID's whole NCCL job (NCCL 2.29.7 on),\n"
    "every rank stopped between operations, then flushes every rank; each\n"
    "communicator resumes at its rank's next NCCL call on it.\n"};

const args_cmd dump_cmd = {
    "cupool", "dump",
    "usage: cupool dump [--timeout SECONDS] PID\n"
    "Makes PID write its statistics where CUPOOL_STATS_FILE says (else its\n"
    "standard error), through its live page (no signal).\n"};

/* Asks pid for r through its page and waits up to timeout seconds for
 * the answer; *before and *after are its views around it. 0, or 1 with a
 * message. */
static int ask(int pid, stats_request r, double timeout, stats_view *before,
               stats_view *after)
{
    int err = stats_page_request(pid, r, timeout, before, after);
    if (!err)
        return 0;
    if (err != -ETIMEDOUT)
        fprintf(stderr, "cupool: %d: %s\n", pid, reader_error_text(err));
    else if (stats_page_read(pid, after) == 0 && after->proc.paused_since)
        fprintf(stderr, "cupool: %d: no answer within %.1f s: it is paused (cupool pause), "
                "and answers after cupool resume\n", pid, timeout);
    else
        fprintf(stderr, "cupool: %d: no answer within %.1f s (is its helper thread "
                "stuck?)\n", pid, timeout);
    return 1;
}

/* The frameworks' part of a flush, from the process's counters before
 * and after: what their caches gave back, each framework that gave any
 * named (stats.h's STATS_FRAMEWORKS). */
static void print_framework_part(const stats_process *a, const stats_process *b, uint64_t got)
{
    static const char *const labels[] = {
#define FW_LABEL(X, name, label, help) label,
        STATS_FRAMEWORKS(FW_LABEL, _)
#undef FW_LABEL
    };
    const uint64_t gave[] = {
#define FW_GAVE(X, name, label, help) b->framework_##name - a->framework_##name,
        STATS_FRAMEWORKS(FW_GAVE, _)
#undef FW_GAVE
    };
    char h[32];
    uint64_t sum = 0;
    for (size_t i = 0; i < sizeof(gave) / sizeof(gave[0]); i++)
        sum += gave[i];
    printf("; %s of it from the framework's cache", stats_fmt_bytes(sum, h, sizeof(h)));
    bool named = false;
    for (size_t i = 0; i < sizeof(gave) / sizeof(gave[0]); i++) {
        if (gave[i]) {
            printf("%s%s %s", named ? ", " : " (", labels[i],
                   stats_fmt_bytes(gave[i], h, sizeof(h)));
            named = true;
        }
    }
    printf("%s, %s from cupool's own", named ? ")" : "",
           stats_fmt_bytes(got > sum ? got - sum : 0, h, sizeof(h)));
}

/* What a flush returned, and the frameworks' part of it, from the
 * process's counters before and after. */
static void print_flush(int pid, const stats_view *before, const stats_view *after)
{
    const stats_process *a = &before->proc, *b = &after->proc;
    char h[32];
    uint64_t got = b->flushed - a->flushed;
    printf("%d: returned %s (%lu bytes) to the driver", pid,
           stats_fmt_bytes(got, h, sizeof(h)), (unsigned long)got);
    if (b->framework_flushes > a->framework_flushes)
        print_framework_part(a, b, got);
    printf("\n");
    uint64_t kept = 0, idle = 0;
    for (uint32_t k = 0; k < after->ndevices; k++) {
        kept += after->dev[k].cached - (after->dev[k].releasable < after->dev[k].cached
                                            ? after->dev[k].releasable : after->dev[k].cached);
        idle += after->dev[k].releasable;
    }
    if (kept)
        printf("%d: %s stays cached, in segments that hold live blocks (a flush returns "
               "whole free segments)\n", pid, stats_fmt_bytes(kept, h, sizeof(h)));
    if (idle)
        printf("%d: %s of free segments is not returned yet (a capture open, or a "
               "release deferred)\n", pid, stats_fmt_bytes(idle, h, sizeof(h)));
    if (b->framework_late > a->framework_late)
        printf("%d: its framework's release is late (its Python lock held in a long "
               "call, or a graph capture under way): it runs as soon as it can, and "
               "the program's log says what it returned\n", pid);
    if (b->framework_unable > a->framework_unable)
        printf("%d: " STATS_FRAMEWORKS_UNABLE " holds its own memory, which cannot be given "
               "back from outside\n", pid);
}

/* cupool flush --nccl: suspends pid's job (signals held till its gates open), flushes each rank. */
static int flush_job(int pid, double timeout)
{
    static jobgate g;
    static stats_view before, after;
    sigset_t old;
    jobgate_signals_block(&old);
    int err = stats_page_read(pid, &after);
    int bad = err || jobgate_suspend_idle(&g, &after, timeout);
    char shown[sizeof(g.why)];
    if (bad) /* g.why carries the ranks' own reasons, their users' words */
        fprintf(stderr, "cupool: %d: %s\n", pid, err ? reader_error_text(err)
                : text_printable(g.why, shown, sizeof(shown)));
    else
        printf("%d: suspended the %zu NCCL communicator%s of its job (%zu process%s here): "
               "NCCL gave back %s; each resumes at its rank's next NCCL call\n", pid, g.nids,
               g.nids == 1 ? "" : "s", g.n, g.n == 1 ? "" : "es",
               stats_fmt_bytes(jobgate_freed(&g), (char[32]){0}, 32));
    fflush(stdout);
    sigprocmask(SIG_SETMASK, &old, NULL); /* the ranks run: a signal now cuts the flush */
    for (size_t r = 0; r < g.n && !bad; r++) {
        if (ask(g.pid[r], STATS_REQ_FLUSH, timeout, &before, &after))
            return 1;
        print_flush(g.pid[r], &before, &after);
    }
    return bad;
}

/* flush and dump (c): [--timeout SECONDS] PID; flush also [--nccl]. */
static int ask_run(const args_cmd *c, stats_request r, int argc, char **argv)
{
    double timeout = 10.0;
    bool nccl = false;
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (r == STATS_REQ_FLUSH && !strcmp(argv[i], "--nccl")) {
            nccl = true;
            continue;
        }
        if (strcmp(argv[i], "--timeout"))
            return args_unexpected(c, argv[i]);
        if (i + 1 >= argc)
            return args_mistake(c, "--timeout needs a value");
        if (args_seconds(argv[++i], 0.01, 86400, &timeout))
            return args_mistake(c, "--timeout takes seconds from 0.01 to 86400, not '%s'",
                                args_shown(argv[i]));
    }
    if (argc - i != 1)
        return args_mistake(c, "one process id is needed");
    int pid = args_pid(argv[i]);
    if (pid < 0)
        return args_mistake(c, "'%s' is not a process id", args_shown(argv[i]));
    if (reader_others_process(pid))
        return 1;
    if (nccl)
        return flush_job(pid, timeout);
    static stats_view before, after;
    if (ask(pid, r, timeout, &before, &after))
        return 1;
    if (r == STATS_REQ_FLUSH) {
        print_flush(pid, &before, &after);
    } else {
        printf("%d: statistics written (to its CUPOOL_STATS_FILE, else its "
               "standard error)\n", pid);
    }
    return 0;
}

int flush_run(int argc, char **argv) { return ask_run(&flush_cmd, STATS_REQ_FLUSH, argc, argv); }

int dump_run(int argc, char **argv) { return ask_run(&dump_cmd, STATS_REQ_DUMP, argc, argv); }
