/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - cupool-pause, behind `cupool pause PID` and `cupool resume PID`:
 * reads the command line and hands the process to pause.c (one process) or
 * job.c (every rank of an NCCL job).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pause.h"
#include "stats.h"

static const char help[] =
    "usage: cupool pause [--timeout SECONDS] [--no-flush] PID\n"
    "       cupool resume PID\n"
    "pause gives process PID's whole GPU back from outside: a process under cupool\n"
    "first returns every cache (cupool's, its framework's) within SECONDS (10), then\n"
    "the driver locks it and checkpoints its device memory to host memory, context\n"
    "included. resume restores it and lets it go on where it was, its addresses\n"
    "unchanged. A process holding NCCL communicators is paused with every rank of\n"
    "its job on this node (their communicators suspended first: NCCL 2.29.7 or\n"
    "later), and resumed with them; a job with ranks on other nodes is refused, as\n"
    "is another user's process. --no-flush moves the caches with the process (to\n"
    "keep them, or to compare). Needs the driver's checkpoint calls (550 or later).\n";

/* What the command line asks for. */
typedef struct pause_args {
    bool pause, no_flush;
    double timeout;
    int pid;
} pause_args;

static int usage(const char *why)
{
    pause_say("%s (see 'cupool pause --help')", why);
    return 2;
}

/* An option cmd does not take: one line naming it, then the usage, on
 * stderr. Returns 2. */
static int unknown_option(const char *cmd, const char *opt)
{
    char shown[64];
    fprintf(stderr, "cupool %s: unknown option '%s'\n%s", cmd,
            stats_printable(opt, shown, sizeof(shown)), help);
    return 2;
}

/* Whether an argument after the command is -h or --help. */
static bool help_asked(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return true;
    return false;
}

/* The options from argv[*i] on (pause's; resume has none) into *a, *i
 * moved past them. 0, or 2 with the mistake said. */
static int options_parse(int argc, char **argv, int *i, pause_args *a)
{
    for (; *i < argc && argv[*i][0] == '-' && argv[*i][1]; (*i)++) {
        const char *o = argv[*i];
        if (a->pause && !strcmp(o, "--no-flush")) {
            a->no_flush = true;
            continue;
        }
        if (!a->pause || strcmp(o, "--timeout"))
            return unknown_option(argv[1], o);
        if (*i + 1 >= argc)
            return usage("--timeout needs a value");
        char *end;
        a->timeout = strtod(argv[++*i], &end);
        if (*end || !(a->timeout > 0 && a->timeout <= 3600)) {
            char shown[64];
            pause_say("--timeout takes seconds above 0, up to 3600, not '%s'",
                stats_printable(argv[*i], shown, sizeof(shown)));
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "pause") && strcmp(argv[1], "resume")))
        return usage("the command is pause or resume");
    if (help_asked(argc, argv))
        return fputs(help, stdout) < 0;
    pause_args a = {.pause = !strcmp(argv[1], "pause"), .timeout = 10};
    int i = 2, rc = options_parse(argc, argv, &i, &a);
    if (rc)
        return rc;
    if (i + 1 != argc)
        return usage(i >= argc ? "no process id given" : "one process id, no more");
    char *end;
    long pid = strtol(argv[i], &end, 10);
    if (*end || end == argv[i] || pid <= 0 || pid > 4194304)
        return usage("not a process id");
    a.pid = (int)pid;
    /* Whose it is first: no driver is loaded for a process not to touch. */
    if (pause_owner_check(a.pid))
        return 1;
    static stats_view v;
    if (stats_page_read(a.pid, &v) == 0 && v.ncomms) /* an NCCL job: job.c */
        return a.pause ? pause_job(&v, a.timeout, a.no_flush)
                       : pause_job_resume(&v, a.timeout);
    if (pause_driver_load())
        return 1;
    return a.pause ? pause_one(a.pid, a.timeout, a.no_flush) : pause_resume_one(a.pid);
}
