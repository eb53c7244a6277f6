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

#include "args.h"
#include "pause.h"
#include "stats.h"

static const char help[] =
    "usage: cupool pause [--timeout SECONDS] [--no-flush] [--no-move] PID\n"
    "       cupool resume PID\n"
    "pause gives process PID's whole GPU back from outside: a process under cupool\n"
    "first returns every cache (cupool's, its framework's) within SECONDS (10), then\n"
    "stops its CUDA calls and copies its VMM segments (CUPOOL_VMM=1, --torch) to\n"
    "pinned host memory on several streams, their addresses kept; then the driver\n"
    "locks it and checkpoints the rest of its device memory, context included.\n"
    "resume restores it and lets it go on where it was, its addresses\n"
    "unchanged. A process holding NCCL communicators is paused with every rank of\n"
    "its job on this node (their communicators suspended first: NCCL 2.29.7 or\n"
    "later), and resumed with them; a job with ranks on other nodes is refused, as\n"
    "is another user's process. --no-flush moves the caches with the process (to\n"
    "keep them, or to compare), by the driver alone; --no-move leaves the copy to\n"
    "the driver. Needs the driver's checkpoint calls (550 or later).\n";

/* What the command line asks for. */
typedef struct pause_args {
    bool pause, no_flush, no_move;
    double timeout;
    int pid;
} pause_args;

static const args_cmd pause_cmd = {"cupool", "pause", help};

static int usage(const char *why)
{
    return args_mistake(&pause_cmd, "%s", why);
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
        if (a->pause && !strcmp(o, "--no-move")) {
            a->no_move = true;
            continue;
        }
        if (!a->pause || strcmp(o, "--timeout"))
            return args_unexpected(&(args_cmd){"cupool", argv[1], help}, o);
        if (*i + 1 >= argc)
            return usage("--timeout needs a value");
        if (args_seconds(argv[++*i], 0.001, 3600, &a->timeout))
            return args_mistake(&pause_cmd, "--timeout takes seconds above 0, up to 3600, "
                                "not '%s'", args_shown(argv[*i]));
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "pause") && strcmp(argv[1], "resume")))
        return usage("the command is pause or resume");
    if (args_wants_help(argc - 2, argv + 2))
        return fputs(help, stdout) < 0;
    pause_args a = {.pause = !strcmp(argv[1], "pause"), .timeout = 10};
    int i = 2, rc = options_parse(argc, argv, &i, &a);
    if (rc)
        return rc;
    if (i + 1 != argc)
        return usage(i >= argc ? "no process id given" : "one process id, no more");
    a.pid = args_pid(argv[i]);
    if (a.pid < 0)
        return usage("not a process id");
    /* Whose it is first: no driver is loaded for a process not to touch. */
    if (pause_owner_check(a.pid))
        return 1;
    static stats_view v;
    if (stats_page_read(a.pid, &v) == 0 && v.ncomms) /* an NCCL job: job.c */
        return a.pause ? pause_job(&v, a.timeout, a.no_flush, a.no_move)
                       : pause_job_resume(&v, a.timeout);
    if (pause_driver_load())
        return 1;
    return a.pause ? pause_one(a.pid, a.timeout, a.no_flush, a.no_move)
                   : pause_resume_one(a.pid);
}
