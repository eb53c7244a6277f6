/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reader.c - see reader.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "args.h"
#include "groupseg.h"
#include "reader.h"
#include "userns.h"

stats_view reader_views[READER_MAX_PROCS];
const stats_view *reader_order[READER_MAX_PROCS];
char reader_buf[1 << 20];

const char *reader_error_text(int err)
{
    switch (err) {
    case -ENOENT: return "no cupool page (not running under cupool, or not yet "
                         "allocating)";
    case -ESRCH: return "the process is gone, or has exec'd another program "
                        "(stale page)";
    case -EPROTO: return "not a page this version of cupool can read";
    case -EPERM: return "no trustworthy page (a file named like it is not a "
                        "regular file of yours with mode 0600 and one link)";
    default: return "the page kept changing while read";
    }
}

/* Says so when pid is another user's process and the caller is not root
 * (of the initial user namespace): its page is in its user's own
 * directory, which no other user reads. True if said. */
bool reader_others_process(int pid)
{
    uint32_t owner;
    userns_whose w = userns_process_whose(pid, &owner);
    if ((w != USERNS_OTHERS && w != USERNS_UNMAPPED) || userns_caller_is_root())
        return false;
    fprintf(stderr, "cupool: %d: another user's process (its page cannot be read by this "
            "user)\n", pid);
    return true;
}

void reader_sleep(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t))
        ;
}

/* Asks each process for its framework's own figures (PyTorch's, read in
 * its main thread at most once a second) and waits up to wait seconds for
 * the answers: a process without a framework answers at once, one whose
 * main thread is busy within a second; what did not come shows its age. */
static void refresh_views(const int *pids, int n, double wait)
{
    uint64_t ticket[READER_MAX_PROCS];
    bool asked[READER_MAX_PROCS];
    for (int i = 0; i < n; i++)
        asked[i] = stats_page_ask(pids[i], STATS_REQ_VIEW, &ticket[i]) == 0;
    for (double waited = 0; waited < wait; waited += 0.01) {
        bool all = true;
        for (int i = 0; i < n; i++)
            if (asked[i] && stats_page_answered(pids[i], STATS_REQ_VIEW, ticket[i]) == 0)
                all = false;
        if (all)
            return;
        reader_sleep(0.01);
    }
}

/* Reads the pages of the given pids, or of every process of this user,
 * after waiting up to wait seconds for their framework figures. Returns
 * the number read, or -1 if a named process had no page. */
int reader_collect(char **pids, int npids, double wait)
{
    int n = 0, bad = 0;
    if (npids == 0) {
        int all[READER_MAX_PROCS];
        size_t removed = 0;
        size_t k = stats_page_list(all, READER_MAX_PROCS, true, &removed);
        if (removed)
            fprintf(stderr, "cupool: removed %zu stale page%s of exited "
                    "processes\n", removed, removed == 1 ? "" : "s");
        refresh_views(all, (int)k, wait);
        for (size_t i = 0; i < k; i++)
            if (stats_page_read(all[i], &reader_views[n]) == 0)
                reader_order[n] = &reader_views[n], n++;
        return n;
    }
    int named[READER_MAX_PROCS] = {0}, k = 0;
    for (int i = 0; i < npids && k < READER_MAX_PROCS; i++)
        if (args_pid(pids[i]) > 0)
            named[k++] = args_pid(pids[i]);
    refresh_views(named, k, wait);
    for (int i = 0; i < npids && n < READER_MAX_PROCS; i++) {
        int pid = args_pid(pids[i]);
        if (pid < 0) {
            fprintf(stderr, "cupool: '%s' is not a process id\n", pids[i]);
            bad = 2; /* a usage mistake */
            continue;
        }
        if (reader_others_process(pid)) {
            bad = bad ? bad : 1;
            continue;
        }
        int err = stats_page_read(pid, &reader_views[n]);
        if (err) {
            fprintf(stderr, "cupool: %d: %s\n", pid, reader_error_text(err));
            bad = bad ? bad : 1;
            continue;
        }
        reader_order[n] = &reader_views[n];
        n++;
    }
    return bad ? -bad : n;
}

/* The group's budget and each member's share, formatted into out. 0, or
 * 1 with a message. */
int reader_group_text(const char *name, int json, int prom, char *out, size_t len)
{
    static group_view g;
    int err = group_read(name, &g);
    if (err) {
        char shown[80];
        fprintf(stderr, "cupool: group %s: %s\n", text_printable(name, shown, sizeof(shown)),
                err == -EINVAL ? "not a group name (1 to 64 of A-Z a-z 0-9 . _ -)"
                : err == -ENOENT ? "no such group of this user (CUPOOL_GROUP)"
                : err == -EPERM || err == -EPROTO ? "the file there is not a group "
                                                    "segment this version reads: refused"
                : strerror(-err));
        return 1;
    }
    stats_format_group(&g, json ? STATS_JSON : prom ? STATS_PROMETHEUS : STATS_TABLE, out, len);
    return 0;
}
