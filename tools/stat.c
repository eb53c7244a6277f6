/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stat.c - cupool-stat, the reader behind `cupool stat`, `cupool top`,
 * `cupool flush`, `cupool dump` and `cupool job`: it reads the live pages
 * of this user's processes and prints them, or asks one process, through
 * its page, to flush or dump its statistics and waits for the answer. It
 * never sends a signal. This file holds `stat` and the dispatch; each other
 * command has its own file (top.c, flush.c, job.c), and what they share
 * is reader.h.
 *
 *   cupool-stat stat [--json | --prometheus] [PID... | --group NAME]
 *   cupool-stat top [--interval SECONDS] [--count N] [--group NAME] [--all]
 *   cupool-stat flush [--timeout SECONDS] [--nccl] PID
 *   cupool-stat dump [--timeout SECONDS] PID
 *   cupool-stat job [--json] PID
 *   cupool-stat fields      every statistic, as docs/STATS.md lists them
 *
 * Exit status: 0, 1 when a process has no page (another user's has none
 * this user may read, and is named as such) or did not answer in time, 2
 * for bad usage.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "commands.h"
#include "proclabels.h"
#include "reader.h"

const args_cmd stat_cmd = {
    "cupool", "stat",
    "usage: cupool stat [--json | --prometheus] [PID... | --group NAME]\n"
    "Statistics of processes running under cupool (all of this user's\n"
    "when no PID is given), read from their live pages.\n"};

/* cupool stat --group NAME. */
static int stat_group(const char *name, int json, int prom)
{
    if (reader_group_text(name, json, prom, reader_buf, sizeof(reader_buf)))
        return 1;
    fputs(reader_buf, stdout);
    return 0;
}

static int stat_run(int argc, char **argv)
{
    int json = 0, prom = 0, i = 0;
    const char *gname = NULL;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (!strcmp(argv[i], "--group") && i + 1 >= argc)
            return args_mistake(&stat_cmd, "--group needs a value");
        if (!strcmp(argv[i], "--group"))
            gname = argv[++i];
        else if (!strcmp(argv[i], "--json"))
            json = 1;
        else if (!strcmp(argv[i], "--prometheus"))
            prom = 1;
        else
            return args_unexpected(&stat_cmd, argv[i]);
    }
    if (json && prom)
        return args_mistake(&stat_cmd, "--json or --prometheus, not both");
    if (gname && i < argc)
        return args_mistake(&stat_cmd, "--group or process ids, not both ('%s')",
                            args_shown(argv[i]));
    if (gname)
        return stat_group(gname, json, prom);
    int n = reader_collect(argv + i, argc - i, 1.0);
    int status = n < 0 ? -n : 0; /* 2: a usage mistake, 1: a process not read */
    if (n < 0)
        n = 0;
    if (json) {
        for (int k = 0; k < n; k++) {
            stats_format_json(reader_order[k], reader_buf, sizeof(reader_buf));
            fputs(reader_buf, stdout);
        }
    } else if (prom) {
        stats_format_prometheus(reader_order, (size_t)n, reader_buf, sizeof(reader_buf));
        fputs(reader_buf, stdout);
    } else if (n) {
        stats_format_table(reader_order, (size_t)n, reader_buf, sizeof(reader_buf));
        fputs(reader_buf, stdout);
    } else if (argc == i) {
        fputs("cupool: no process of this user is running under cupool\n", stderr);
    }
    return status;
}

/* cupool-stat fields: docs/STATS.md, every statistic (a test keeps the two equal). */
static int fields_run(void)
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

/* Every command, its usage and what runs it. */
static const struct command {
    const args_cmd *args;
    int (*run)(int argc, char **argv);
} commands[] = {
    {&stat_cmd, stat_run}, {&top_cmd, top_run}, {&flush_cmd, flush_run},
    {&dump_cmd, dump_run}, {&job_cmd, job_run},
};

static int usage(void)
{
    fputs("usage: cupool stat [--json | --prometheus] [PID... | --group NAME]\n"
          "       cupool top [--interval SECONDS] [--count N] [--group NAME] [--all]\n"
          "       cupool flush [--timeout SECONDS] [--nccl] PID\n"
          "       cupool dump [--timeout SECONDS] PID\n"
          "       cupool job [--json] PID\n", stderr);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (!strcmp(argv[1], "fields"))
        return fields_run();
    if (!strcmp(argv[1], "--version")) {
        printf("cupool %s\n", CUPOOL_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        const struct command *c = &commands[i];
        if (strcmp(argv[1], c->args->cmd))
            continue;
        if (args_wants_help(argc - 2, argv + 2))
            return fputs(c->args->help, stdout) < 0;
        return c->run(argc - 2, argv + 2);
    }
    return usage();
}
