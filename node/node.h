/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.h - every process under cupool on this node, as one reader sees
 * them: root sees every user's, in containers too; a user sees their own.
 *
 * A process's page is found from the process itself: its /proc/PID/maps
 * names the page file it maps, with its device and inode, and the file is
 * opened where that process sees it (/proc/PID/root, then the path, a
 * component at a time following no link; or /proc/PID/map_files) and must
 * be that very file. No page directory is listed, so no file or directory
 * another user makes, of any name or number, hides a process or slows the
 * scan. The page is read as untrusted input: it counts only if it is a
 * regular file of its process's user, mode 0600, one link, of the right
 * version, naming its process by its own pid namespace's pid
 * (stats_page_read_mapped). Nothing is asked of any process: no request,
 * no signal. Each process is labelled with whose it is: its user, its
 * CUPOOL_GROUP, its Kubernetes pod and container (from its cgroup path),
 * its Slurm job (its cgroup path, or SLURM_JOB_ID).
 *
 * A reader sees the processes whose maps it may read: root every one, a
 * user their own, except one that made itself not dumpable (its maps are
 * root's to read then).
 */
#ifndef CUPOOL_STATS_NODE_H
#define CUPOOL_STATS_NODE_H

#include <stddef.h>
#include <stdint.h>

#include "proclabels.h"
#include "stats.h"

/* Why a page found was not counted. */
#define NODE_SKIP_REASONS(X)                                                      \
    X(gone, "its process ended, or runs another program, or the file at the "   \
            "path it maps is not the file it maps")                             \
    X(foreign, "not a regular file of its process's user, mode 0600, one link")  \
    X(corrupt, "not a page this version reads")                                  \
    X(busy, "it kept changing while read")
enum node_skip {
#define NODE_X(name, help) NODE_SKIP_##name,
    NODE_SKIP_REASONS(NODE_X)
#undef NODE_X
    NODE_SKIPS
};

typedef struct node_proc {
    int pid;               /* in the reader's pid namespace */
    uint32_t uid;          /* as the reader sees it */
    char user[33];         /* its name, or the number */
    proc_vouched vouched;  /* what its cgroup says (proclabels.h) */
    proc_claimed claimed;  /* what its environment says */
    stats_view view;       /* view.pid is set to pid */
} node_proc;

typedef struct node_scan {
    node_proc *procs;      /* malloc'd, nprocs of them, by pid */
    size_t nprocs;
    uint64_t skipped[NODE_SKIPS]; /* pages not counted in this scan */
} node_scan;

/* Scans the node: every process the reader may look at, and its page
 * wherever it is; with ndirs directories, only the processes whose page
 * lies in one of them (DIR/cupool-UID/..., as the process sees it: a
 * narrowing, never a place to look). 0, or -ENOMEM (s holds what was
 * found before). Free s with node_scan_free. */
int node_scan_run(node_scan *s, const char *const *dirs, size_t ndirs);
void node_scan_free(node_scan *s);

/* The reason names, for the exporter's counters. */
const char *node_skip_name(enum node_skip r);

#endif
