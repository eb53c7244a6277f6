/* SPDX-License-Identifier: Apache-2.0 */
/*
 * top.c - cupool top: the pages of this user's processes (--all: of every
 * process under cupool on the node), refreshed in place, sorted by what
 * each reserves, with the devices' totals and a group's table.
 */
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "node.h"
#include "reader.h"
#include "commands.h"

const args_cmd top_cmd = {
    "cupool", "top",
    "usage: cupool top [--interval SECONDS] [--count N] [--group NAME] [--all]\n"
    "The same, refreshed in place, sorted by reserved memory. --all: every\n"
    "process under cupool on the node (root: every user's, in containers\n"
    "too), with its user and job (Slurm job, pod, or group).\n"};

static uint64_t total_reserved(const stats_view *v)
{
    uint64_t r = 0;
    for (uint32_t k = 0; k < v->ndevices; k++)
        r += v->dev[k].reserved;
    return r;
}

static int by_reserved(const void *a, const void *b)
{
    uint64_t x = total_reserved(*(const stats_view *const *)a);
    uint64_t y = total_reserved(*(const stats_view *const *)b);
    return (x < y) - (x > y);
}

/* Per device, over every process shown: how many, what they reserve,
 * allocate and cache, and the cap (the same for all, or "various"). */
static size_t device_totals(int n, char *out, size_t len)
{
    size_t at = 0;
    out[0] = '\0';
    for (int dev = 0; dev < STATS_MAX_DEVICES && at < len; dev++) {
        uint64_t r = 0, a = 0, c = 0, cap = 0;
        int procs = 0;
        bool various = false;
        for (int i = 0; i < n; i++)
            for (uint32_t k = 0; k < reader_order[i]->ndevices; k++) {
                const stats_device *d = &reader_order[i]->dev[k];
                if (d->device != dev)
                    continue;
                various |= procs && d->cap != cap;
                cap = d->cap;
                r += d->reserved, a += d->allocated, c += d->cached, procs++;
            }
        if (!procs)
            continue;
        char rb[32], ab[32], cb[32], capb[32];
        at += (size_t)snprintf(out + at, len - at, "dev %d: %d process%s, reserved %s "
                               "(allocated %s, cached %s), cap %s\n", dev, procs,
                               procs == 1 ? "" : "es", stats_fmt_bytes(r, rb, sizeof(rb)),
                               stats_fmt_bytes(a, ab, sizeof(ab)),
                               stats_fmt_bytes(c, cb, sizeof(cb)),
                               various ? "various" : cap ? stats_fmt_bytes(cap, capb, sizeof(capb))
                                                         : "none");
    }
    return at;
}

/* Cuts text after its first max lines, saying how many more there were. */
static void fit_lines(char *text, size_t len, int max)
{
    int lines = 0;
    char *c = text;
    for (; *c && lines < max; c++)
        lines += *c == '\n';
    int more = 0;
    for (char *d = c; *d; d++)
        more += *d == '\n';
    if (more)
        snprintf(c, len - (size_t)(c - text), "... %d more line%s (the largest are above)\n",
                 more, more == 1 ? "" : "s");
}

static struct termios saved_tty;
static bool tty_raw;

static void tty_restore(void)
{
    if (tty_raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
    tty_raw = false;
}

static void on_stop_signal(int sig)
{
    tty_restore();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* Keys without Enter and without echo while top runs on a terminal. */
static void tty_keys(void)
{
    if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, &saved_tty))
        return;
    struct termios t = saved_tty;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &t))
        return;
    tty_raw = true;
    atexit(tty_restore);
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
}

/* Waits up to seconds; true if q (or Q) was pressed meanwhile. */
static bool wait_for_q(double seconds)
{
    if (!tty_raw) {
        reader_sleep(seconds);
        return false;
    }
    double left = seconds;
    while (left > 0) {
        struct pollfd p = {STDIN_FILENO, POLLIN, 0};
        int ms = left > 0.1 ? 100 : (int)(left * 1000) + 1;
        if (poll(&p, 1, ms) > 0) {
            char c;
            if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q'))
                return true;
        }
        left -= ms / 1000.0;
    }
    return false;
}

/* top --all: every process under cupool on the node (node.h). */
static bool top_all;
static char top_jobs[READER_MAX_PROCS][96];

/* A process's job in a few words: its Slurm job, pod, container or group.
 * Each comes from the process (its environment, its cgroup's names): made
 * printable, as the user's name is. */
static void job_of(const node_proc *p, char *out, size_t len)
{
    char a[40], c[40], u[sizeof(p->user)];
    text_printable(p->user, u, sizeof(u));
    const char *job = p->vouched.slurm_job[0] ? p->vouched.slurm_job : p->claimed.slurm_job;
    if (job[0])
        snprintf(out, len, "%s slurm:%s", u, text_printable(job, a, sizeof(a)));
    else if (p->vouched.pod[0])
        snprintf(out, len, "%s pod:%.8s/%.12s", u, text_printable(p->vouched.pod, a, sizeof(a)),
                 text_printable(p->vouched.container, c, sizeof(c)));
    else if (p->claimed.group[0])
        snprintf(out, len, "%s group:%s", u, text_printable(p->claimed.group, a, sizeof(a)));
    else
        snprintf(out, len, "%s", u);
}

/* Fills reader_views and reader_order from a node scan: how many. */
static int collect_node(void)
{
    node_scan s;
    node_scan_run(&s, NULL, 0);
    int n = 0;
    for (size_t i = 0; i < s.nprocs && n < READER_MAX_PROCS; i++, n++) {
        reader_views[n] = s.procs[i].view;
        reader_order[n] = &reader_views[n];
        job_of(&s.procs[i], top_jobs[n], sizeof(top_jobs[n]));
    }
    node_scan_free(&s);
    return n;
}

/* One frame of top: the title, the devices' totals, the table (as many
 * rows as the terminal holds) and the group's table if asked for. */
static void top_frame(int tty, const char *gname, char *gbuf, size_t glen)
{
    /* The first frame waits for fresh figures, as stat does (a program
     * just started shows what it holds, not its page's last tick); each
     * later frame shows what the frame before asked for. */
    static bool first = true;
    int n = top_all ? collect_node() : reader_collect(NULL, 0, first ? 1.0 : 0);
    first = false;
    qsort(reader_order, (size_t)n, sizeof(reader_order[0]), by_reserved);
    const char *jobs[READER_MAX_PROCS];
    for (int i = 0; i < n; i++) /* it points into reader_views: its index is its job's */
        jobs[i] = top_all ? top_jobs[reader_order[i] - reader_views] : NULL;
    static char totals[4096];
    device_totals(n, totals, sizeof(totals));
    stats_format_table_with(reader_order, top_all ? "USER JOB" : NULL, jobs, (size_t)n,
                            reader_buf, sizeof(reader_buf));
    struct winsize ws;
    if (gname && reader_group_text(gname, 0, 0, gbuf, glen))
        snprintf(gbuf, glen, "group %s: gone\n", text_printable(gname, (char[80]){0}, 80));
    if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 4) {
        /* The title, the line "... more" may take, and the cursor's own
         * last row (a newline there would scroll the title away). */
        int used = 3;
        for (const char *c = totals; *c; c++)
            used += *c == '\n';
        for (const char *c = gname ? gbuf : ""; *c; c++)
            used += *c == '\n';
        fit_lines(reader_buf, sizeof(reader_buf), ws.ws_row - used > 2 ? ws.ws_row - used : 2);
    }
    time_t now = time(NULL);
    char when[32];
    strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
    printf("%scupool top - %s - %d process%s, sorted by reserved%s\n%s%s%s%s",
           tty ? "\033[H\033[2J" : "", when, n, n == 1 ? "" : "es",
           tty_raw ? " - q quits" : "", totals, reader_buf, gname ? "\n" : "", gname ? gbuf : "");
    fflush(stdout);
}

/* top's options into *interval, *count and *gname (its table checked into
 * gbuf). 0, 1 (no such group, said) or 2 (a usage mistake, said). */
static int top_options(int argc, char **argv, double *interval, long *count,
                       const char **gname, char *gbuf, size_t glen)
{
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--all")) {
            top_all = true;
            continue;
        }
        if (strcmp(o, "--interval") && strcmp(o, "--count") && strcmp(o, "--group"))
            return args_unexpected(&top_cmd, o);
        if (i + 1 >= argc)
            return args_mistake(&top_cmd, "%s needs a value", o);
        const char *v = argv[++i];
        char *end;
        if (!strcmp(o, "--interval") && args_seconds(v, 0.05, 86400, interval))
            return args_mistake(&top_cmd, "--interval takes seconds from 0.05 to 86400, not '%s'",
                                args_shown(v));
        if (!strcmp(o, "--count") && ((*count = strtol(v, &end, 10)) < 1 || !*v || *end))
            return args_mistake(&top_cmd, "--count takes a whole number from 1 up, not '%s'",
                                args_shown(v));
        if (!strcmp(o, "--group") && reader_group_text((*gname = v), 0, 0, gbuf, glen))
            return 1;
    }
    return 0;
}

int top_run(int argc, char **argv)
{
    double interval = 1.0;
    long count = -1;
    const char *gname = NULL;
    static char gbuf[1 << 16];
    int rc = top_options(argc, argv, &interval, &count, &gname, gbuf, sizeof(gbuf));
    if (rc)
        return rc;
    int tty = isatty(STDOUT_FILENO);
    if (tty)
        tty_keys();
    for (long it = 0; count < 0 || it < count; it++) {
        top_frame(tty, gname, gbuf, sizeof(gbuf));
        if ((count < 0 || it + 1 < count) && wait_for_q(interval))
            break;
    }
    tty_restore();
    return 0;
}
