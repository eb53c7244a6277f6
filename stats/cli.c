/*
 * cli.c - cupool-stat, the reader behind `cupool stat`, `cupool top` and
 * `cupool flush`: it reads the live pages of this user's processes and
 * prints them, or asks one process to flush and waits for the page to
 * show it done.
 *
 *   cupool-stat stat [--json | --prometheus] [PID...]
 *   cupool-stat top [--interval SECONDS] [--count N]
 *   cupool-stat flush [--timeout SECONDS] PID
 *
 * Exit status: 0, 1 when a process has no page or a flush did not finish,
 * 2 for bad usage.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stats.h"

enum { MAX_PROCS = 256 };

static stats_view views[MAX_PROCS];
static const stats_view *order[MAX_PROCS];
static char buf[1 << 20];

static int usage(void)
{
    fputs("usage: cupool stat [--json | --prometheus] [PID...]\n"
          "       cupool top [--interval SECONDS] [--count N]\n"
          "       cupool flush [--timeout SECONDS] PID\n", stderr);
    return 2;
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
    case -ESRCH: return "the process is gone (stale page)";
    case -EPROTO: return "not a page this version of cupool can read";
    default: return "the page kept changing while read";
    }
}

/* Reads the pages of the given pids, or of every process of this user.
 * Returns the number read, or -1 if a named process had no page. */
static int collect(char **pids, int npids)
{
    int n = 0, bad = 0;
    if (npids == 0) {
        int all[MAX_PROCS];
        size_t removed = 0;
        size_t k = stats_page_list(all, MAX_PROCS, true, &removed);
        if (removed)
            fprintf(stderr, "cupool: removed %zu stale page%s of exited "
                    "processes\n", removed, removed == 1 ? "" : "s");
        for (size_t i = 0; i < k; i++)
            if (stats_page_read(all[i], &views[n]) == 0)
                order[n] = &views[n], n++;
        return n;
    }
    for (int i = 0; i < npids && n < MAX_PROCS; i++) {
        int pid = parse_pid(pids[i]);
        if (pid < 0) {
            fprintf(stderr, "cupool: '%s' is not a process id\n", pids[i]);
            bad = 1;
            continue;
        }
        int err = stats_page_read(pid, &views[n]);
        if (err) {
            fprintf(stderr, "cupool: %d: %s\n", pid, read_error(err));
            bad = 1;
            continue;
        }
        order[n] = &views[n];
        n++;
    }
    return bad ? -1 : n;
}

static int cmd_stat(int argc, char **argv)
{
    int json = 0, prom = 0, i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--prometheus"))
            prom = 1;
        else
            return usage();
    }
    if (json && prom)
        return usage();
    int n = collect(argv + i, argc - i);
    int status = n < 0;
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
        puts("no process is running under cupool");
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

static int cmd_top(int argc, char **argv)
{
    double interval = 1.0;
    long count = -1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--interval") && i + 1 < argc)
            interval = atof(argv[++i]);
        else if (!strcmp(argv[i], "--count") && i + 1 < argc)
            count = atol(argv[++i]);
        else
            return usage();
    }
    if (interval < 0.05)
        interval = 0.05;
    int tty = isatty(STDOUT_FILENO);
    for (long it = 0; count < 0 || it < count; it++) {
        int n = collect(NULL, 0);
        qsort(order, (size_t)n, sizeof(order[0]), by_reserved);
        stats_format_table(order, (size_t)n, buf, sizeof(buf));
        time_t now = time(NULL);
        char when[32];
        strftime(when, sizeof(when), "%H:%M:%S", localtime(&now));
        printf("%scupool top - %s - %d process%s, sorted by reserved\n%s",
               tty ? "\033[H\033[2J" : "", when, n, n == 1 ? "" : "es", buf);
        fflush(stdout);
        if (count < 0 || it + 1 < count)
            sleep_s(interval);
    }
    return 0;
}

static int cmd_flush(int argc, char **argv)
{
    double timeout = 10.0;
    int i = 0;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout = atof(argv[++i]);
        else
            return usage();
    }
    if (argc - i != 1)
        return usage();
    int pid = parse_pid(argv[i]);
    static stats_view v;
    int err = pid < 0 ? -ENOENT : stats_page_read(pid, &v);
    if (err) {
        fprintf(stderr, "cupool: %s: %s\n", argv[i], read_error(err));
        return 1;
    }
    if (!v.flush_signal) {
        fprintf(stderr, "cupool: %d: its flush signal is disabled "
                "(CUPOOL_FLUSH_SIGNAL=none)\n", pid);
        return 1;
    }
    uint64_t flushes = v.proc.signal_flushes, bytes = v.proc.flushed;
    if (kill(pid, v.flush_signal)) {
        fprintf(stderr, "cupool: %d: %s\n", pid, strerror(errno));
        return 1;
    }
    for (double waited = 0; waited < timeout; waited += 0.01) {
        sleep_s(0.01);
        if (stats_page_read(pid, &v) == 0 && v.proc.signal_flushes > flushes) {
            char h[32];
            uint64_t got = v.proc.flushed - bytes;
            printf("%d: returned %s (%lu bytes) to the driver\n", pid,
                   stats_fmt_bytes(got, h, sizeof(h)), (unsigned long)got);
            return 0;
        }
    }
    fprintf(stderr, "cupool: %d: no flush seen within %.1f s\n", pid, timeout);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "stat"))
        return cmd_stat(argc - 2, argv + 2);
    if (!strcmp(argv[1], "top"))
        return cmd_top(argc - 2, argv + 2);
    if (!strcmp(argv[1], "flush"))
        return cmd_flush(argc - 2, argv + 2);
    return usage();
}
