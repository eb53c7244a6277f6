/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job.c - cupool job: the NCCL job of a process, each communicator it
 * holds matched with the processes on this node that hold its other ranks
 * (jobview.h). Reads pages only.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "jobview.h"
#include "node.h"
#include "reader.h"
#include "commands.h"

const args_cmd job_cmd = {
    "cupool", "job",
    "usage: cupool job [--json] PID\n"
    "The NCCL job of PID: each communicator it holds (id, its rank and the\n"
    "size), the processes on this node that hold other ranks of it (read\n"
    "from every page this user may read; root: every user's), and how\n"
    "many ranks are on other nodes. Reads pages only.\n"};

/* cupool job [--json] PID: PID's communicators, matched on the node. */
int job_run(int argc, char **argv)
{
    bool json = false;
    const char *arg = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (argv[i][0] == '-' || arg)
            return args_unexpected(&job_cmd, argv[i]);
        else
            arg = argv[i];
    }
    if (!arg)
        return args_mistake(&job_cmd, "a process id is needed");
    int pid = args_pid(arg);
    if (pid < 0)
        return args_mistake(&job_cmd, "'%s' is not a process id", args_shown(arg));
    if (reader_others_process(pid))
        return 1;
    static stats_view v;
    int err = stats_page_read(pid, &v);
    if (err) {
        fprintf(stderr, "cupool: %d: %s\n", pid, reader_error_text(err));
        return 1;
    }
    if (!v.ncomms) {
        fprintf(stderr, "cupool: %d: holds no NCCL communicator (none made, or all "
                "destroyed)\n", pid);
        return 1;
    }
    node_scan s;
    node_scan_run(&s, NULL, 0);
    jobview_format(&v, &s, json, reader_buf, sizeof(reader_buf));
    node_scan_free(&s);
    fputs(reader_buf, stdout);
    return 0;
}
