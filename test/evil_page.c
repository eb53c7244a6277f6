/* SPDX-License-Identifier: Apache-2.0 */
/*
 * evil_page.c - a process that writes its own live page as a hostile user
 * may (the page is that user's file: no cupool code is needed to write it),
 * for test_safety.py's check that no tool prints what a page says raw.
 *
 * Usage: evil_page READY. Every string of its page (the program's name, the
 * gate's reason) is EVIL_TEXT; it lists one NCCL communicator, so the tools
 * treat it as a job; it joins group EVIL_GROUP (its member's name is the
 * process's own, which the test makes hostile by exec'ing it under such a
 * name). It answers every request: flushes and views at once, the NCCL gate's
 * close and open as asked, and refuses every suspend and resume with
 * EVIL_TEXT as the reason. Writes READY once the page is up; runs until
 * SIGTERM.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "groupseg.h"
#include "stats.h"

static volatile sig_atomic_t stop;

static void on_term(int sig)
{
    (void)sig;
    stop = 1;
}

/* The view every publish writes: text in every string. */
static void view_init(stats_view *v, const char *text)
{
    memset(v, 0, sizeof(*v));
    v->pid = (int32_t)getpid();
    snprintf(v->comm, sizeof(v->comm), "%s", text);
    v->updated_ns = clock_unix_ns();
    v->ndevices = 1;
    v->dev[0].device = 0;
    v->dev[0].reserved = 1 << 20;
    v->ncomms = 1;
    /* Its own communicator: two test runs at once on a node would claim
     * one id twice, and the job commands would refuse both. */
    v->comms[0] = (stats_comm){.id = 0xe5c0e5c000000000ull | (uint32_t)getpid(), .rank = 0,
                               .nranks = 1, .device = 0, .issued = 3};
    v->proc.nccl_comms = 1;
    v->proc.nccl_calls = 3;
    v->gate.can_suspend = 1;
    v->gate.freed = STATS_UNKNOWN;
    snprintf(v->gate.why, sizeof(v->gate.why), "%s", text);
}

/* Answers the NCCL gate's request: close and open as asked, every suspend
 * and resume refused with the hostile reason. */
static void answer_nccl(stats_page *p, stats_view *v)
{
    stats_nccl_ask a;
    stats_page_nccl_asked(p, &a);
    v->gate.error = 0;
    if (a.want == STATS_NCCL_CLOSE)
        v->gate.state = STATS_GATE_CLOSED;
    else if (a.want == STATS_NCCL_OPEN)
        v->gate.state = STATS_GATE_OPEN;
    else
        v->gate.error = -EIO;
}

int main(int argc, char **argv)
{
    const char *text = getenv("EVIL_TEXT"), *gname = getenv("EVIL_GROUP");
    if (argc != 2 || !text) {
        fprintf(stderr, "usage: EVIL_TEXT=... [EVIL_GROUP=name] evil_page READY\n");
        return 2;
    }
    signal(SIGTERM, on_term);
    const char *why = NULL;
    bool passed_over = false;
    stats_page *p = stats_page_create(&why, &passed_over);
    if (!p) {
        fprintf(stderr, "evil_page: no page: %s\n", why);
        return 1;
    }
    static group_cap caps[STATS_MAX_DEVICES];
    caps[0].bytes = 1ull << 30;
    group *g = gname ? group_join(gname, caps, &why) : NULL;
    if (gname && !g)
        fprintf(stderr, "evil_page: no group: %s\n", why);
    if (g) /* a member holding memory is listed by name */
        group_charge(g, 0, 1 << 20);
    static stats_view v;
    view_init(&v, text);
    stats_page_publish(p, &v);
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0)
        close(fd);
    while (!stop) {
        for (int r = 0; r < STATS_NREQUESTS; r++) {
            uint64_t t = stats_page_pending(p, (stats_request)r);
            if (!t)
                continue;
            if (r == STATS_REQ_NCCL)
                answer_nccl(p, &v);
            v.updated_ns = clock_unix_ns();
            stats_page_publish(p, &v);
            stats_page_answer(p, (stats_request)r, t);
        }
        nanosleep(&(struct timespec){0, 5000000L}, NULL);
    }
    if (g)
        group_leave(g);
    stats_page_remove(p);
    return 0;
}
