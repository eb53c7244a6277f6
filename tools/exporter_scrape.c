/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exporter_scrape.c - one scrape of the node for cupool exporter (see
 * exporter_scrape.h): every process's series, the node's totals per device, the
 * exporter's own figures.
 *
 * What a page says is bounded by what the node has: a page may name up to
 * STATS_MAX_DEVICES devices, and one that names more than the node's GPUs
 * (or one twice) would multiply its series for nothing, so only entries of
 * devices below the node's count are kept, each once. The whole answer is
 * bounded too (--max-answer): where every process does not fit, each one's
 * share is measured, and processes are taken each user's first before
 * anyone's second (so that
 * one user's many processes cannot push every other user's out), until the
 * next would pass the bound; those left out are counted and named in a
 * comment line, and still counted in the node's totals.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "exporter_scrape.h"
#include "node.h"
#include "proclabels.h"

/* Room kept for what follows the processes' series: the node's totals (4
 * families of at most STATS_MAX_DEVICES lines) and the exporter's own. */
enum { LABEL_LEN = 1024, TAIL_RESERVE = 64 * 1024 };

/* Counters across scrapes. */
static uint64_t scrapes, skipped_total[NODE_SKIPS], devices_dropped_total;

/* A growing text buffer. */
typedef struct text {
    char *s;
    size_t n, cap;
    bool failed;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text *t, const char *fmt, ...)
{
    for (int round = 0; round < 2 && !t->failed; round++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0)
            break;
        if (t->s && (size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = (t->cap + (size_t)k + 1) * 2;
        char *s = realloc(t->s, cap);
        if (!s)
            t->failed = true;
        else
            t->s = s, t->cap = cap;
    }
}

/* Keeps of v's device entries those of a device below ndev, each once:
 * how many it dropped. */
static uint32_t bound_devices(stats_view *v, int ndev)
{
    uint32_t n = v->ndevices < STATS_MAX_DEVICES ? v->ndevices : STATS_MAX_DEVICES, kept = 0;
    uint64_t seen = 0;
    for (uint32_t k = 0; k < n; k++) {
        int d = v->dev[k].device;
        if (d < 0 || d >= ndev || (seen >> d & 1))
            continue;
        seen |= 1ull << d;
        v->dev[kept++] = v->dev[k];
    }
    v->ndevices = kept;
    return n - kept;
}

/* p's labels, escaped and comma-separated: user (its uid's name), pod_uid,
 * container_id and slurm_job (its cgroup's), claimed_slurm_job and
 * claimed_group (its environment's). */
static void labels_of(const node_proc *p, char *buf)
{
    const proc_vouched *v = &p->vouched;
    const proc_claimed *c = &p->claimed;
    const char *names[] = {"user", "pod_uid", "container_id", "slurm_job",
                           "claimed_slurm_job", "claimed_group"};
    const char *values[] = {p->user, v->pod, v->container, v->slurm_job, c->slurm_job, c->group};
    size_t n = 0;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && n + 1 < LABEL_LEN; i++) {
        if (i)
            buf[n++] = ',';
        stats_prometheus_label(names[i], values[i], buf + n, LABEL_LEN - n);
        n += strlen(buf + n);
    }
}

/* A process's place in the order processes are taken in. */
typedef struct turn {
    size_t rank;   /* how many of its user's processes come before it */
    uint32_t uid;
    int pid;
    size_t i;      /* its index in the scan */
} turn;

static int by_user_pid(const void *a, const void *b)
{
    const turn *x = a, *y = b;
    return x->uid != y->uid ? (x->uid < y->uid ? -1 : 1) : (x->pid > y->pid) - (x->pid < y->pid);
}

static int by_rank_pid(const void *a, const void *b)
{
    const turn *x = a, *y = b;
    return x->rank != y->rank ? (x->rank < y->rank ? -1 : 1)
                              : (x->pid > y->pid) - (x->pid < y->pid);
}

/* Which processes fit in budget bytes (cost[i] each): keep[i] set for
 * those taken, each user's first before anyone's second. How many were
 * left out, or SIZE_MAX when out of memory. */
static size_t choose(const node_scan *s, const size_t *cost, size_t budget, bool *keep)
{
    turn *t = calloc(s->nprocs + 1, sizeof(*t));
    if (!t)
        return SIZE_MAX;
    for (size_t i = 0; i < s->nprocs; i++)
        t[i] = (turn){0, s->procs[i].uid, s->procs[i].pid, i};
    qsort(t, s->nprocs, sizeof(*t), by_user_pid);
    for (size_t i = 1; i < s->nprocs; i++)
        t[i].rank = t[i].uid == t[i - 1].uid ? t[i - 1].rank + 1 : 0;
    qsort(t, s->nprocs, sizeof(*t), by_rank_pid);
    size_t used = 0, left = 0;
    for (size_t k = 0; k < s->nprocs; k++) {
        size_t i = t[k].i;
        keep[i] = cost[i] <= budget - used;
        used += keep[i] ? cost[i] : 0;
        left += !keep[i];
    }
    free(t);
    return left;
}

/* Formats the first m of v (extra their labels) into t, in at most room
 * bytes: false, t unchanged, when they need more (or out of memory). */
static bool format_within(text *t, const stats_view **v, const char **extra, size_t m,
                          size_t room)
{
    if (t->cap - t->n < room) {
        char *grown = realloc(t->s, t->n + room);
        if (!grown)
            return t->failed = true, false;
        t->s = grown, t->cap = t->n + room;
    }
    size_t need = stats_format_prometheus_with(v, (const char *const *)extra, m,
                                               t->s + t->n, room);
    if (need >= room)
        return false;
    t->n += need;
    return true;
}

/* Measures each process's share of the answer (cost[i]: the text with it
 * alone, less the families' headers every answer holds, base), keeps
 * those that fit in budget and formats them into t: how many were left
 * out, SIZE_MAX on failure. */
static size_t format_chosen(text *t, node_scan *s, const stats_view **v, const char **extra,
                            size_t budget)
{
    size_t n = s->nprocs, left = SIZE_MAX, m = 0, total;
    size_t *cost = calloc(n + 1, sizeof(*cost));
    bool *keep = calloc(n + 1, sizeof(*keep));
    size_t base = stats_format_prometheus_with(v, (const char *const *)extra, 0, NULL, 0);
    if (cost && keep) {
        for (size_t i = 0; i < n; i++)
            cost[i] = stats_format_prometheus_with(&v[i], (const char *const *)&extra[i], 1,
                                                   NULL, 0) - base;
        left = choose(s, cost, budget > base ? budget - base : 0, keep);
    }
    total = base + 1;
    for (size_t i = 0; left != SIZE_MAX && i < n; i++)
        if (keep[i])
            v[m] = v[i], extra[m++] = extra[i], total += cost[i];
    if (left != SIZE_MAX && !format_within(t, v, extra, m, total))
        left = SIZE_MAX;
    free(cost);
    free(keep);
    return left;
}

/* The per-process series, within o->max_answer: how many processes were
 * left out (*dropped: device entries dropped), or SIZE_MAX on failure.
 * Every process is formatted at once into the room the bound leaves; only
 * when that is too small is each one's share measured. */
static size_t add_processes(text *t, node_scan *s, const exporter_opts *o, uint64_t *dropped)
{
    size_t n = s->nprocs, left = SIZE_MAX;
    const stats_view **v = calloc(n + 1, sizeof(*v));
    const char **extra = calloc(n + 1, sizeof(*extra));
    char *labels = calloc(n + 1, LABEL_LEN);
    if (v && extra && labels) {
        for (size_t i = 0; i < n; i++) {
            *dropped += bound_devices(&s->procs[i].view, o->devices);
            v[i] = &s->procs[i].view;
            extra[i] = labels + i * LABEL_LEN;
            labels_of(&s->procs[i], labels + i * LABEL_LEN);
        }
        size_t budget = o->max_answer > TAIL_RESERVE ? o->max_answer - TAIL_RESERVE : 0;
        if (format_within(t, v, extra, n, budget))
            left = 0;
        else if (!t->failed)
            left = format_chosen(t, s, v, extra, budget);
    }
    free(v);
    free(extra);
    free(labels);
    return left;
}

/* Device totals over every process, those left out too, so that a
 * dashboard adds nothing. */
static void add_devices(text *t, const node_scan *s)
{
    static const struct { const char *name, *help; size_t off; } sums[] = {
        {"reserved_bytes", "bytes every process under cupool reserves on the device",
         offsetof(stats_device, reserved)},
        {"allocated_bytes", "bytes allocated to the programs on the device",
         offsetof(stats_device, allocated)},
        {"cached_bytes", "bytes cached (free in the pools) on the device",
         offsetof(stats_device, cached)},
    };
    for (size_t f = 0; f < sizeof(sums) / sizeof(sums[0]) + 1; f++) {
        bool procs = f == sizeof(sums) / sizeof(sums[0]);
        const char *name = procs ? "processes" : sums[f].name;
        text_add(t, "# HELP cupool_node_%s %s\n# TYPE cupool_node_%s gauge\n", name,
                 procs ? "processes under cupool using the device" : sums[f].help, name);
        for (int dev = 0; dev < STATS_MAX_DEVICES; dev++) {
            uint64_t sum = 0;
            bool used = false;
            for (size_t i = 0; i < s->nprocs; i++)
                for (uint32_t k = 0; k < s->procs[i].view.ndevices; k++) {
                    const stats_device *d = &s->procs[i].view.dev[k];
                    if (d->device != dev)
                        continue;
                    used = true;
                    sum += procs ? 1 : *(const uint64_t *)((const char *)d + sums[f].off);
                }
            if (used)
                text_add(t, "cupool_node_%s{device=\"%d\"} %lu\n", name, dev,
                         (unsigned long)sum);
        }
    }
}

/* The exporter's own figures. */
static void add_self(text *t, const node_scan *s, size_t left, const exporter_opts *o,
                     double seconds)
{
    text_add(t, "# HELP cupool_exporter_pages_skipped_total pages found but not counted, by "
                "reason (a page that vanishes or lies mid-scrape is skipped, never a failed "
                "scrape)\n# TYPE cupool_exporter_pages_skipped_total counter\n");
    for (int r = 0; r < NODE_SKIPS; r++) {
        skipped_total[r] += s->skipped[r];
        text_add(t, "cupool_exporter_pages_skipped_total{reason=\"%s\"} %lu\n",
                 node_skip_name((enum node_skip)r), (unsigned long)skipped_total[r]);
    }
    text_add(t, "# HELP cupool_exporter_devices_dropped_total device entries of pages "
                "naming a device the node does not have (or one twice), not shown\n"
                "# TYPE cupool_exporter_devices_dropped_total counter\n"
                "cupool_exporter_devices_dropped_total %lu\n",
             (unsigned long)devices_dropped_total);
    if (left)
        text_add(t, "# cupool exporter: %zu of %zu processes left out: their series would "
                    "pass the answer's bound of %zu bytes (--max-answer); the node's totals "
                    "count them\n", left, s->nprocs, o->max_answer);
    text_add(t, "# HELP cupool_exporter_processes_left_out processes this scrape saw but "
                "left out, the answer's bound (--max-answer) reached\n"
                "# TYPE cupool_exporter_processes_left_out gauge\n"
                "cupool_exporter_processes_left_out %zu\n", left);
    text_add(t, "# HELP cupool_exporter_processes processes under cupool this scrape saw\n"
                "# TYPE cupool_exporter_processes gauge\ncupool_exporter_processes %zu\n",
             s->nprocs);
    text_add(t, "# HELP cupool_exporter_scrape_duration_seconds how long this scrape took\n"
                "# TYPE cupool_exporter_scrape_duration_seconds gauge\n"
                "cupool_exporter_scrape_duration_seconds %.6f\n", seconds);
    text_add(t, "# HELP cupool_exporter_scrapes_total scrapes served\n"
                "# TYPE cupool_exporter_scrapes_total counter\n"
                "cupool_exporter_scrapes_total %lu\n", (unsigned long)++scrapes);
}

int exporter_scrape(const exporter_opts *o, char **out, size_t *len)
{
    double t0 = clock_mono_s();
    text t = {0};
    node_scan s;
    if (node_scan_run(&s, o->ndirs ? o->dirs : NULL, o->ndirs) == -ENOMEM)
        t.failed = true;
    uint64_t dropped = 0;
    size_t left = add_processes(&t, &s, o, &dropped);
    t.failed |= left == SIZE_MAX;
    devices_dropped_total += dropped;
    add_devices(&t, &s);
    add_self(&t, &s, left == SIZE_MAX ? 0 : left, o, clock_mono_s() - t0);
    node_scan_free(&s);
    if (t.failed) {
        free(t.s);
        *out = NULL;
        return -ENOMEM;
    }
    char *fit = realloc(t.s, t.n + 1); /* the room the bound left, given back */
    *out = fit ? fit : t.s, *len = t.n;
    return 0;
}
