/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cli.c - cupool-stat, the reader behind `cupool stat`, `cupool top`,
 * `cupool flush` and `cupool dump`: it reads the live pages of this user's
 * processes and prints them, or asks one process, through its page, to
 * flush or dump its statistics and waits for the answer. It never sends a
 * signal.
 *
 *   cupool-stat stat [--json | --prometheus] [PID... | --group NAME]
 *   cupool-stat top [--interval SECONDS] [--count N] [--group NAME]
 *   cupool-stat flush [--timeout SECONDS] PID
 *   cupool-stat dump [--timeout SECONDS] PID
 *   cupool-stat job [--json] PID
 *
 * Exit status: 0, 1 when a process has no page (another user's has none
 * this user may read, and is named as such) or did not answer in time, 2
 * for bad usage.
 */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "groupseg.h"
#include "jobgate.h"
#include "jobview.h"
#include "node.h"
#include "proclabels.h"
#include "stats.h"
#include "userns.h"

enum { MAX_PROCS = 256 };

static stats_view views[MAX_PROCS];
static const stats_view *order[MAX_PROCS];
static char buf[1 << 20];

static int usage(void)
{
    fputs("usage: cupool stat [--json | --prometheus] [PID... | --group NAME]\n"
          "       cupool top [--interval SECONDS] [--count N] [--group NAME] [--all]\n"
          "       cupool flush [--timeout SECONDS] [--nccl] PID\n"
          "       cupool dump [--timeout SECONDS] PID\n"
          "       cupool job [--json] PID\n", stderr);
    return 2;
}

/* Each command's usage, for `cupool COMMAND --help` and after a mistake;
 * NULL for no such command. */
static const char *help_of(const char *cmd)
{
    static const struct { const char *cmd, *text; } h[] = {
        {"stat", "usage: cupool stat [--json | --prometheus] [PID... | --group NAME]\n"
                 "Statistics of processes running under cupool (all of this user's\n"
                 "when no PID is given), read from their live pages.\n"},
        {"top", "usage: cupool top [--interval SECONDS] [--count N] [--group NAME] [--all]\n"
                "The same, refreshed in place, sorted by reserved memory. --all: every\n"
                "process under cupool on the node (root: every user's, in containers\n"
                "too), with its user and job (Slurm job, pod, or group).\n"},
        {"flush", "usage: cupool flush [--timeout SECONDS] [--nccl] PID\n"
                  "Makes PID return its cached memory to the driver, through its live\n"
                  "page (no signal), and prints the bytes returned. --nccl: first\n"
                  "suspends the communicators of PID's whole NCCL job (NCCL 2.29.7 on),\n"
                  "every rank stopped between operations, then flushes every rank; each\n"
                  "communicator resumes at its rank's next NCCL call on it.\n"},
        {"dump", "usage: cupool dump [--timeout SECONDS] PID\n"
                 "Makes PID write its statistics where CUPOOL_STATS_FILE says (else its\n"
                 "standard error), through its live page (no signal).\n"},
        {"job", "usage: cupool job [--json] PID\n"
                "The NCCL job of PID: each communicator it holds (id, its rank and the\n"
                "size), the processes on this node that hold other ranks of it (read\n"
                "from every page this user may read; root: every user's), and how\n"
                "many ranks are on other nodes. Reads pages only.\n"},
    };
    for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++)
        if (!strcmp(cmd, h[i].cmd))
            return h[i].text;
    return NULL;
}

/* `cupool COMMAND --help`: that command's usage on stdout, exit 0. */
static int help(const char *cmd)
{
    fputs(help_of(cmd), stdout);
    return 0;
}

/* An argument as a message shows it: control bytes as '?' (one at a time:
 * the buffer is reused). */
static const char *shown(const char *arg)
{
    static char b[128];
    return stats_printable(arg, b, sizeof(b));
}

/* A usage mistake of cmd, in one line on stderr. Returns 2. */
static int usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "cupool %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'cupool %s --help')\n", cmd);
    va_end(ap);
    return 2;
}

/* An argument of cmd that is neither an option it takes nor in its place.
 * An unknown option (it starts with '-') is named on the first line, as
 * every command names it, then cmd's usage follows, on stderr. Returns 2. */
static int unexpected(const char *cmd, const char *arg)
{
    if (arg[0] != '-' || !arg[1])
        return usage_error(cmd, "unexpected argument '%s'", shown(arg));
    fprintf(stderr, "cupool %s: unknown option '%s'\n%s", cmd, shown(arg), help_of(cmd));
    return 2;
}

/* Whether argv holds --help or -h. */
static bool wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return true;
    return false;
}

/* One line naming the mistake, then exit status 2. */
static int bad(const char *what, const char *value)
{
    fprintf(stderr, "cupool: %s '%s' (see 'cupool --help')\n", what, shown(value));
    return 2;
}

/* Parses seconds: a finite number from lo to hi. */
static int parse_seconds(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !isfinite(v) || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static void sleep_s(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t))
        ;
}

static int parse_pid(const char *s)
{
    char *end;
    long pid = strtol(s, &end, 10);
    return *s && !*end && pid > 0 && pid < (1L << 30) ? (int)pid : -1;
}

static const char *read_error(int err)
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
static bool others_process(int pid)
{
    uint32_t owner;
    userns_whose w = userns_process_whose(pid, &owner);
    if ((w != USERNS_OTHERS && w != USERNS_UNMAPPED) || userns_caller_is_root())
        return false;
    fprintf(stderr, "cupool: %d: another user's process (its page cannot be read by this "
            "user)\n", pid);
    return true;
}

/* Asks each process for its framework's own figures (PyTorch's, read in
 * its main thread at most once a second) and waits up to wait seconds for
 * the answers: a process without a framework answers at once, one whose
 * main thread is busy within a second; what did not come shows its age. */
static void refresh_views(const int *pids, int n, double wait)
{
    uint64_t ticket[MAX_PROCS];
    bool asked[MAX_PROCS];
    for (int i = 0; i < n; i++)
        asked[i] = stats_page_ask(pids[i], STATS_REQ_VIEW, &ticket[i]) == 0;
    for (double waited = 0; waited < wait; waited += 0.01) {
        bool all = true;
        for (int i = 0; i < n; i++)
            if (asked[i] && stats_page_answered(pids[i], STATS_REQ_VIEW, ticket[i]) == 0)
                all = false;
        if (all)
            return;
        sleep_s(0.01);
    }
}

/* Reads the pages of the given pids, or of every process of this user,
 * after waiting up to wait seconds for their framework figures. Returns
 * the number read, or -1 if a named process had no page. */
static int collect(char **pids, int npids, double wait)
{
    int n = 0, bad = 0;
    if (npids == 0) {
        int all[MAX_PROCS];
        size_t removed = 0;
        size_t k = stats_page_list(all, MAX_PROCS, true, &removed);
        if (removed)
            fprintf(stderr, "cupool: removed %zu stale page%s of exited "
                    "processes\n", removed, removed == 1 ? "" : "s");
        refresh_views(all, (int)k, wait);
        for (size_t i = 0; i < k; i++)
            if (stats_page_read(all[i], &views[n]) == 0)
                order[n] = &views[n], n++;
        return n;
    }
    int named[MAX_PROCS] = {0}, k = 0;
    for (int i = 0; i < npids && k < MAX_PROCS; i++)
        if (parse_pid(pids[i]) > 0)
            named[k++] = parse_pid(pids[i]);
    refresh_views(named, k, wait);
    for (int i = 0; i < npids && n < MAX_PROCS; i++) {
        int pid = parse_pid(pids[i]);
        if (pid < 0) {
            fprintf(stderr, "cupool: '%s' is not a process id\n", pids[i]);
            bad = 2; /* a usage mistake */
            continue;
        }
        if (others_process(pid)) {
            bad = bad ? bad : 1;
            continue;
        }
        int err = stats_page_read(pid, &views[n]);
        if (err) {
            fprintf(stderr, "cupool: %d: %s\n", pid, read_error(err));
            bad = bad ? bad : 1;
            continue;
        }
        order[n] = &views[n];
        n++;
    }
    return bad ? -bad : n;
}

/* The group's budget and each member's share, formatted into out. 0, or
 * 1 with a message. */
static int group_text(const char *name, int json, int prom, char *out, size_t len)
{
    static group_view g;
    int err = group_read(name, &g);
    if (err) {
        char shown[80];
        fprintf(stderr, "cupool: group %s: %s\n", stats_printable(name, shown, sizeof(shown)),
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

/* cupool stat --group NAME. */
static int stat_group(const char *name, int json, int prom)
{
    if (group_text(name, json, prom, buf, sizeof(buf)))
        return 1;
    fputs(buf, stdout);
    return 0;
}

static int cmd_stat(int argc, char **argv)
{
    int json = 0, prom = 0, i = 0;
    const char *gname = NULL;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--group") && i + 1 >= argc)
            return usage_error("stat", "--group needs a value");
        if (!strcmp(argv[i], "--group"))
            gname = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--prometheus"))
            prom = 1;
        else
            return unexpected("stat", argv[i]);
    }
    if (json && prom)
        return usage_error("stat", "--json or --prometheus, not both");
    if (gname && i < argc)
        return usage_error("stat", "--group or process ids, not both ('%s')",
                           shown(argv[i]));
    if (gname)
        return stat_group(gname, json, prom);
    int n = collect(argv + i, argc - i, 1.0);
    int status = n < 0 ? -n : 0; /* 2: a usage mistake, 1: a process not read */
    if (n < 0)
        n = 0;
    if (json) {
        for (int k = 0; k < n; k++) {
            stats_format_json(order[k], buf, sizeof(buf));
            fputs(buf, stdout);
        }
    } else if (prom) {
        stats_format_prometheus(order, (size_t)n, buf, sizeof(buf));
        fputs(buf, stdout);
    } else if (n) {
        stats_format_table(order, (size_t)n, buf, sizeof(buf));
        fputs(buf, stdout);
    } else if (argc == i) {
        fputs("cupool: no process of this user is running under cupool\n", stderr);
    }
    return status;
}

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
            for (uint32_t k = 0; k < order[i]->ndevices; k++) {
                const stats_device *d = &order[i]->dev[k];
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
        sleep_s(seconds);
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
static char top_jobs[MAX_PROCS][96];

/* A process's job in a few words: its Slurm job, pod, container or group. */
static void job_of(const node_proc *p, char *out, size_t len)
{
    char a[40];
    if (p->job[0])
        snprintf(out, len, "%s slurm:%s", p->user, stats_printable(p->job, a, sizeof(a)));
    else if (p->pod[0])
        snprintf(out, len, "%s pod:%.8s/%.12s", p->user, stats_printable(p->pod, a, sizeof(a)),
                 p->container);
    else if (p->group[0])
        snprintf(out, len, "%s group:%s", p->user, stats_printable(p->group, a, sizeof(a)));
    else
        snprintf(out, len, "%s", p->user);
}

/* Fills views and order from a node scan: how many. */
static int collect_node(void)
{
    node_scan s;
    const char *dirs[] = {stats_page_dir(), "/dev/shm", "/tmp"}; /* each read once */
    node_scan_run(&s, dirs, 3);
    int n = 0;
    for (size_t i = 0; i < s.nprocs && n < MAX_PROCS; i++, n++) {
        views[n] = s.procs[i].view;
        order[n] = &views[n];
        job_of(&s.procs[i], top_jobs[n], sizeof(top_jobs[n]));
    }
    node_scan_free(&s);
    return n;
}

/* One frame of top: the title, the devices' totals, the table (as many
 * rows as the terminal holds) and the group's table if asked for. */
static void top_frame(int tty, const char *gname, char *gbuf, size_t glen)
{
    int n = top_all ? collect_node() : collect(NULL, 0, 0); /* the next frame shows
                                                             what they read */
    qsort(order, (size_t)n, sizeof(order[0]), by_reserved);
    const char *jobs[MAX_PROCS];
    for (int i = 0; i < n; i++) /* order[i] points into views: its index is its job's */
        jobs[i] = top_all ? top_jobs[order[i] - views] : NULL;
    static char totals[4096];
    device_totals(n, totals, sizeof(totals));
    stats_format_table_with(order, top_all ? "USER JOB" : NULL, jobs, (size_t)n, buf,
                            sizeof(buf));
    struct winsize ws;
    if (gname && group_text(gname, 0, 0, gbuf, glen))
        snprintf(gbuf, glen, "group %s: gone\n", gname);
    if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 4) {
        /* The title, the line "... more" may take, and the cursor's own
         * last row (a newline there would scroll the title away). */
        int used = 3;
        for (const char *c = totals; *c; c++)
            used += *c == '\n';
        for (const char *c = gname ? gbuf : ""; *c; c++)
            used += *c == '\n';
        fit_lines(buf, sizeof(buf), ws.ws_row - used > 2 ? ws.ws_row - used : 2);
    }
    time_t now = time(NULL);
    char when[32];
    strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
    printf("%scupool top - %s - %d process%s, sorted by reserved%s\n%s%s%s%s",
           tty ? "\033[H\033[2J" : "", when, n, n == 1 ? "" : "es",
           tty_raw ? " - q quits" : "", totals, buf, gname ? "\n" : "", gname ? gbuf : "");
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
            return unexpected("top", o);
        if (i + 1 >= argc)
            return usage_error("top", "%s needs a value", o);
        const char *v = argv[++i];
        char *end;
        if (!strcmp(o, "--interval") && parse_seconds(v, 0.05, 86400, interval))
            return bad("top: --interval takes seconds from 0.05 to 86400, not", v);
        if (!strcmp(o, "--count") && ((*count = strtol(v, &end, 10)) < 1 || !*v || *end))
            return bad("top: --count takes a whole number from 1 up, not", v);
        if (!strcmp(o, "--group") && group_text((*gname = v), 0, 0, gbuf, glen))
            return 1;
    }
    return 0;
}

static int cmd_top(int argc, char **argv)
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

/* cupool-stat fields: docs/STATS.md, every statistic (a test keeps the two equal). */
static int cmd_fields(void)
{
    static const char *const units[] = {"count", "bytes"};
    enum { u_COUNT = 0, u_BYTES = 1 };
    puts("# cupool's statistics\n\n"
         "What `cupool stat --json` prints for each process (one object per line),\n"
         "what `--prometheus` exports (as `cupool_NAME`, `_bytes` added to bytes unless\n"
         "the name ends in it, `_total` to counters) and `CUPOOL_STATS_FILE` dumps.\n"
         "Made by `build/cupool-stat fields` from the one field list\n"
         "(`stats/stats.h`); `make test` checks that this file is what it prints.\n\n"
         "Top level: `cupool` (1), `version`, `pid`, `comm`, `updated_ns` (when the\n"
         "process last published, CLOCK_REALTIME), `flush_signal` (0 = none),\n"
         "`devices` (one object per device: `device` and the fields below, and\n"
         "`fragmentation`, 1 - the largest free block or, if more, the releasable bytes, / cached), `process` (the fields below).\n"
         "`null` is a figure the process could not tell.\n\n"
         "## Per device\n\n| field | unit | kind | what |\n| --- | --- | --- | --- |");
#define X(name, unit, kind, help) \
    printf("| `%s` | %s | %s | %s |\n", #name, units[u_##unit],                       \
           #kind[0] == 'G' ? "gauge" : "counter", help);
    STATS_DEVICE_FIELDS(X)
    puts("\n## Per process\n\n| field | unit | kind | what |\n| --- | --- | --- | --- |");
    STATS_PROCESS_FIELDS(X)
#undef X
    return puts(PROCLABELS_DOC) < 0;
}

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
        fprintf(stderr, "cupool: %d: %s\n", pid, read_error(err));
    else if (stats_page_read(pid, after) == 0 && after->proc.paused_since)
        fprintf(stderr, "cupool: %d: no answer within %.1f s: it is paused (cupool pause), "
                "and answers after cupool resume\n", pid, timeout);
    else
        fprintf(stderr, "cupool: %d: no answer within %.1f s (is its helper thread "
                "stuck?)\n", pid, timeout);
    return 1;
}

/* What a flush returned, and the frameworks' part of it, from the
 * process's counters before and after. */
static void print_flush(int pid, const stats_view *before, const stats_view *after)
{
    const stats_process *a = &before->proc, *b = &after->proc;
    char h[32], t[32], c[32], own[32];
    uint64_t got = b->flushed - a->flushed;
    uint64_t torch = b->framework_torch - a->framework_torch;
    uint64_t cupy = b->framework_cupy - a->framework_cupy;
    printf("%d: returned %s (%lu bytes) to the driver", pid,
           stats_fmt_bytes(got, h, sizeof(h)), (unsigned long)got);
    if (b->framework_flushes > a->framework_flushes) {
        printf("; %s of it from the framework's cache (", stats_fmt_bytes(torch + cupy, h,
                                                                         sizeof(h)));
        if (torch || !cupy)
            printf("torch.cuda.empty_cache %s%s", stats_fmt_bytes(torch, t, sizeof(t)),
                   cupy ? ", " : "");
        if (cupy)
            printf("CuPy's pool %s", stats_fmt_bytes(cupy, c, sizeof(c)));
        printf("), %s from cupool's own",
               stats_fmt_bytes(got > torch + cupy ? got - torch - cupy : 0, own, sizeof(own)));
    }
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
        printf("%d: JAX holds its own memory, which cannot be given back from outside\n", pid);
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
    if (bad)
        fprintf(stderr, "cupool: %d: %s\n", pid, err ? read_error(err) : g.why);
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

/* flush and dump: [--timeout SECONDS] PID; flush also [--nccl]. */
static int cmd_ask(const char *name, stats_request r, int argc, char **argv)
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
            return unexpected(name, argv[i]);
        if (i + 1 >= argc)
            return usage_error(name, "--timeout needs a value");
        if (parse_seconds(argv[++i], 0.01, 86400, &timeout))
            return bad("--timeout takes seconds from 0.01 to 86400, not", argv[i]);
    }
    if (argc - i != 1) {
        fprintf(stderr, "cupool: %s takes one process id (cupool %s [--timeout "
                "SECONDS] PID)\n", name, name);
        return 2;
    }
    int pid = parse_pid(argv[i]);
    if (pid < 0)
        return bad("not a process id:", argv[i]);
    if (others_process(pid))
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

/* cupool job [--json] PID: PID's communicators, matched on the node. */
static int cmd_job(int argc, char **argv)
{
    bool json = false;
    const char *arg = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--json"))
            json = true;
        else if (argv[i][0] == '-' || arg)
            return unexpected("job", argv[i]);
        else
            arg = argv[i];
    }
    if (!arg)
        return usage_error("job", "a process id is needed");
    int pid = parse_pid(arg);
    if (pid < 0)
        return bad("not a process id:", arg);
    if (others_process(pid))
        return 1;
    static stats_view v;
    int err = stats_page_read(pid, &v);
    if (err) {
        fprintf(stderr, "cupool: %d: %s\n", pid, read_error(err));
        return 1;
    }
    if (!v.ncomms) {
        fprintf(stderr, "cupool: %d: holds no NCCL communicator (none made, or all "
                "destroyed)\n", pid);
        return 1;
    }
    node_scan s;
    const char *dirs[] = {stats_page_dir(), "/dev/shm", "/tmp"}; /* each read once */
    node_scan_run(&s, dirs, 3);
    jobview_format(&v, &s, json, buf, sizeof(buf));
    node_scan_free(&s);
    fputs(buf, stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "fields"))
        return cmd_fields();
    if (!strcmp(argv[1], "--version")) {
        printf("cupool %s\n", CUPOOL_VERSION);
        return 0;
    }
    if (!help_of(argv[1]))
        return usage();
    if (wants_help(argc - 2, argv + 2))
        return help(argv[1]);
    if (!strcmp(argv[1], "stat"))
        return cmd_stat(argc - 2, argv + 2);
    if (!strcmp(argv[1], "top"))
        return cmd_top(argc - 2, argv + 2);
    if (!strcmp(argv[1], "flush"))
        return cmd_ask("flush", STATS_REQ_FLUSH, argc - 2, argv + 2);
    if (!strcmp(argv[1], "dump"))
        return cmd_ask("dump", STATS_REQ_DUMP, argc - 2, argv + 2);
    if (!strcmp(argv[1], "job"))
        return cmd_job(argc - 2, argv + 2);
    return usage();
}
