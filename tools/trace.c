/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c - cupool-trace, behind `cupool replay`, `cupool plot` and
 * `cupool import-torch`:
 *
 *   cupool-trace replay TRACE [--policy P[,P...]] [--capacity SIZE]
 *                       [--max-reserved SIZE] [--trim UNIT] [--stitch] [--mid-max SIZE]
 *                       [--fence-lag TIME] [--device N] [--json] [--timeline CSV]
 *   cupool-trace plot TRACE -o OUT.svg [--policy P] [--capacity SIZE]
 *                       [--max-reserved SIZE] [--trim UNIT] [--stitch] [--mid-max SIZE]
 *                       [--fence-lag TIME] [--device N] [--title TEXT] [--by-event]
 *   cupool-trace dump TRACE        one record per line, as encode reads
 *   cupool-trace encode -o TRACE [--source text|torch] [--pid N]
 *                       [--comm NAME] < TEXT
 *
 * Text records: TIME_NS OP DEVICE ADDR SIZE [RESULT], OP one of alloc,
 * free, fence, reserve, release, flush, oom; '#' starts a comment.
 * Exit status: 0, 1 for a trace that cannot be read or written, 2 for bad
 * usage.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "plot.h"
#include "replay.h"
#include "stats.h"
#include "trace.h"
#include "trace_gz.h"

static const char *me = "cupool"; /* what the user typed */

/* cupool as a whole, for a mistake not tied to one command. */
static const args_cmd whole = {"cupool", NULL, NULL};

/* One line naming a usage mistake, arg shown with control bytes as '?'.
 * Returns 2. */
static int usage_error(const char *fmt, const char *arg)
{
    return args_mistake(&whole, fmt, args_shown(arg));
}

/* Each command's help, for `cupool COMMAND --help` and after an unknown
 * option; prog: how the user calls it. */
typedef struct help { const char *cmd, *prog, *text; } help;
static const help helps[] = {
    {"replay", "cupool", "usage: cupool replay TRACE [--policy P[,P...]] [--capacity SIZE]\n"
               "                     [--max-reserved SIZE] [--trim UNIT] [--stitch]\n"
               "                     [--mid-max SIZE] [--fence-lag TIME] [--device N] [--json]\n"
               "                     [--timeline CSV]\n"
               "Runs a recorded trace (plain or gzip'd) through cupool's pool on the CPU\n"
               "and prints, per policy (best, strict, first, nosplit, none; all by\n"
               "default), peak reserved and allocated, fragmentation, fences and\n"
               "out-of-memory.\n"
               "  --capacity SIZE      the simulated device's memory (unlimited)\n"
               "  --max-reserved SIZE  a cap, as CUPOOL_MAX_RESERVED\n"
               "  --trim UNIT          the device can take back UNIT-sized parts of\n"
               "                       segments (a power of two, 512 or more), as CUPOOL_VMM\n"
               "  --stitch             the device can map free units (--trim's, else as\n"
               "                       CUPOOL_STITCH: 8 MiB, 2 MiB under --max-reserved)\n"
               "                       into one new range for a request no free block\n"
               "                       fits, as CUPOOL_STITCH\n"
               "  --mid-max SIZE       large requests up to SIZE share mid segments, as\n"
               "                       CUPOOL_MID_MAX (10M; 0 = each its own segment)\n"
               "  --fence-lag TIME     fences are asynchronous, as CUPOOL_FENCE=poll's:\n"
               "                       each is done TIME after it began (trace time:\n"
               "                       200us, 1ms) unless the pool forces it first\n"
               "  --device N           only device N of the trace\n"
               "  --json               one JSON object\n"
               "  --timeline CSV       the first policy's figures after every event\n"},
    {"plot", "cupool", "usage: cupool plot TRACE -o OUT.svg [--policy P] [--capacity SIZE]\n"
             "                   [--max-reserved SIZE] [--trim UNIT] [--stitch]\n"
             "                   [--mid-max SIZE] [--fence-lag TIME] [--device N]\n"
             "                   [--title TEXT] [--by-event]\n"
             "Draws allocated, reserved and the largest free block over time (or, with\n"
             "--by-event, over the events) under one policy, as a self-contained SVG.\n"},
    {"dump", "cupool-trace", "usage: cupool-trace dump TRACE\n"
             "Prints one record per line, as encode reads them.\n"},
    {"encode", "cupool-trace",
               "usage: cupool-trace encode -o TRACE [--source text|torch] [--pid N]\n"
               "                          [--comm NAME] < TEXT\n"
               "Writes a trace from lines TIME_NS OP DEVICE ADDR SIZE [RESULT].\n"},
};

/* The help of command cmd, or NULL if there is no such command. */
static const help *help_of(const char *cmd)
{
    for (size_t i = 0; i < sizeof(helps) / sizeof(helps[0]); i++)
        if (!strcmp(cmd, helps[i].cmd))
            return &helps[i];
    return NULL;
}

/* An option command cmd does not take: one line naming it, then the
 * command's usage, on stderr. Returns 2. */
static int unknown_option(const char *cmd, const char *o)
{
    const help *h = help_of(cmd);
    return args_unexpected(&(args_cmd){h->prog, cmd, h->text}, o);
}

typedef struct args {
    const char *trace, *out, *title, *timeline;
    char policies[256];
    uint64_t capacity, max_reserved, trim, mid_max, fence_lag;
    bool mid_set;
    int device;               /* -1 = every device in the trace */
    bool json, by_event, stitch;
    trace_source source;
    int pid;
    const char *comm;
} args;

/* Options that take a value. */
static bool takes_value(const char *o)
{
    static const char *const v[] = {"-o", "--output", "--title", "--timeline", "--policy",
                                    "--capacity", "--max-reserved", "--trim", "--mid-max", "--fence-lag", "--device",
                                    "--pid", "--source", "--comm"};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (!strcmp(o, v[i]))
            return true;
    return false;
}

/* A duration: 0, or a number with ns, us, ms or s, as nanoseconds (at
 * most a day). 0 or -1. */
static int parse_duration(const char *text, uint64_t *ns)
{
    static const struct { const char *unit; double scale; } units[] = {
        {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || !(v >= 0))
        return -1;
    double scale = 0;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcmp(end, units[i].unit))
            scale = units[i].scale;
    if (!scale && !(*end == 0 && v == 0))
        return -1;
    if (v * scale > 86400e9)
        return -1;
    *ns = (uint64_t)(v * scale + 0.5);
    return 0;
}

/* The options before any is parsed. */
static void args_init(args *a)
{
    memset(a, 0, sizeof(*a));
    a->device = -1;
    a->source = TRACE_SRC_TEXT;
    a->comm = "";
}

/* If o is a flag (an option without a value), sets it and returns true. */
static bool parse_flag(const char *o, args *a)
{
    bool *flag = !strcmp(o, "--json")       ? &a->json
                 : !strcmp(o, "--by-event") ? &a->by_event
                 : !strcmp(o, "--stitch")   ? &a->stitch
                                            : NULL;
    if (flag)
        *flag = true;
    return flag != NULL;
}

/* --capacity, --max-reserved or --trim (o) set to the size v. 0 or 2 (a
 * usage error, reported). */
static int parse_size_option(const char *o, const char *v, args *a)
{
    uint64_t n;
    if (stats_parse_size(v, &n))
        return usage_error("bad size '%s' (examples: 80G, 512MiB, 1000000)", v);
    if (!strcmp(o, "--trim") && (n < POOL_ALIGN || (n & (n - 1))))
        return usage_error("--trim needs a power of two of 512 or more, not '%s'", v);
    *(!strcmp(o, "--capacity")       ? &a->capacity
      : !strcmp(o, "--max-reserved") ? &a->max_reserved
                                     : &a->trim) = n;
    return 0;
}

/* --mid-max set to v: 0 up to the pool's mid segment. 0 or 2 (reported). */
static int parse_mid_max(const char *v, args *a)
{
    pool_config def;
    uint64_t n;
    pool_config_default(&def);
    if (stats_parse_size(v, &n) || n > def.mid_segment)
        return usage_error("bad size '%s' (0 up to the mid segment, 20M, as "
                           "CUPOOL_MID_MAX)", v);
    a->mid_max = n;
    a->mid_set = true;
    return 0;
}

/* --device (0 to 255) or --pid (0 to 2^30), o, set to v. 0 or 2
 * (reported). */
static int parse_number_option(const char *o, const char *v, args *a)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || end == v || n < 0 || n > (!strcmp(o, "--device") ? 255 : 1L << 30))
        return usage_error("bad number '%s'", v);
    *(!strcmp(o, "--device") ? &a->device : &a->pid) = (int)n;
    return 0;
}

/* --source set to v: text or torch. 0 or 2 (reported). */
static int parse_source(const char *v, args *a)
{
    if (!strcmp(v, "text"))
        a->source = TRACE_SRC_TEXT;
    else if (!strcmp(v, "torch"))
        a->source = TRACE_SRC_TORCH;
    else
        return usage_error("bad source '%s' (text or torch)", v);
    return 0;
}

/* --fence-lag set to v, a duration. 0 or 2 (reported). */
static int parse_fence_lag(const char *v, args *a)
{
    if (parse_duration(v, &a->fence_lag))
        return usage_error("bad duration '%s' (examples: 0, 200us, 1.5ms, 1s)", v);
    return 0;
}

/* Option o, one that takes_value, set to v. 0 or 2 (reported). */
static int parse_value(const char *o, const char *v, args *a)
{
    if (!strcmp(o, "-o") || !strcmp(o, "--output"))
        a->out = v;
    else if (!strcmp(o, "--title"))
        a->title = v;
    else if (!strcmp(o, "--timeline"))
        a->timeline = v;
    else if (!strcmp(o, "--policy"))
        snprintf(a->policies, sizeof(a->policies), "%s", v);
    else if (!strcmp(o, "--comm"))
        a->comm = v;
    else if (!strcmp(o, "--fence-lag"))
        return parse_fence_lag(v, a);
    else if (!strcmp(o, "--mid-max"))
        return parse_mid_max(v, a);
    else if (!strcmp(o, "--capacity") || !strcmp(o, "--max-reserved") ||
             !strcmp(o, "--trim"))
        return parse_size_option(o, v, a);
    else if (!strcmp(o, "--device") || !strcmp(o, "--pid"))
        return parse_number_option(o, v, a);
    else if (!strcmp(o, "--source"))
        return parse_source(v, a);
    else /* in takes_value's list but not here */
        return usage_error("unknown option '%s'", o);
    return 0;
}

/* Parses the options every command (cmd, one of helps) shares. Returns 0,
 * 2 (a usage error, reported) or 3 (help asked for). */
static int parse(const char *cmd, int argc, char **argv, args *a)
{
    args_init(a);
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i];
        int rc;
        if (!strcmp(o, "--help") || !strcmp(o, "-h"))
            return 3;
        if (parse_flag(o, a))
            continue;
        if (o[0] == '-' && o[1]) { /* an option; "-" alone is an argument */
            if (!takes_value(o))
                return unknown_option(cmd, o);
            if (i + 1 >= argc)
                return usage_error("%s needs a value", o);
            if ((rc = parse_value(o, argv[++i], a)))
                return rc;
        } else if (!a->trace) {
            a->trace = o;
        } else {
            return usage_error("unexpected argument '%s'", o);
        }
    }
    return 0;
}

/* Loads the trace at path into *t, saying what is wrong with it (path
 * shown with control bytes as '?', as every path and name here). 0, or 1
 * with nothing to free. */
static int load(const char *path, trace *t)
{
    char why[1024], shown[1024];
    if (trace_load_any(path, t, why, sizeof(why))) {
        fprintf(stderr, "%s: %s\n", me, text_printable(why, shown, sizeof(shown)));
        return 1;
    }
    text_printable(path, shown, sizeof(shown));
    if (t->partial_bytes)
        fprintf(stderr, "%s: %s: the trace ends in a partial record (%zu bytes, "
                "ignored): the recording process was cut short\n", me, shown,
                t->partial_bytes);
    if (t->bad_records)
        fprintf(stderr, "%s: %s: %zu records with an unknown operation skipped\n",
                me, shown, t->bad_records);
    return 0;
}

static bool has_dev(const uint64_t devs[4], int d)
{
    return devs[d / 64] >> (d % 64) & 1;
}

/* Loads a->trace and the set of its devices; if --device names one the
 * trace does not have, says so. 0, or 1 (reported; nothing to free). */
static int load_devices(const args *a, trace *t, uint64_t devs[4])
{
    if (load(a->trace, t))
        return 1;
    replay_devices(t, devs);
    if (a->device >= 0 && !has_dev(devs, a->device)) {
        char shown[1024];
        fprintf(stderr, "%s: %s has no records of device %d\n", me,
                text_printable(a->trace, shown, sizeof(shown)), a->device);
        trace_free(t);
        return 1;
    }
    return 0;
}

/* ---- dump and encode ------------------------------------------------------- */

static int cmd_dump(const args *a)
{
    trace t;
    char comm[sizeof(t.hdr.comm)];
    if (!a->trace)
        return usage_error("dump: no trace given%s", "");
    if (load(a->trace, &t))
        return 1;
    /* The name is the recorded program's to choose: never raw to a terminal. */
    printf("# cupool trace v%u: pid %d (%s), source %s, %zu records\n",
           t.hdr.version, t.hdr.pid, text_printable(t.hdr.comm, comm, sizeof(comm)),
           t.hdr.source == TRACE_SRC_SHIM ? "libcupool.so"
           : t.hdr.source == TRACE_SRC_TORCH ? "torch" : "text", t.n);
    for (size_t i = 0; i < t.n; i++) {
        const trace_record *r = &t.rec[i];
        printf("%" PRIu64 " %s %u %#" PRIx64 " %" PRIu64 " %s\n", r->time,
               trace_op_name(trace_op_of(r)), trace_device(r), r->addr,
               trace_size(r), trace_result_name(trace_result_of(r)));
    }
    trace_free(&t);
    return 0;
}

static int parse_op(const char *s)
{
    for (int op = TRACE_ALLOC; op < TRACE_OPS; op++)
        if (!strcmp(s, trace_op_name((trace_op)op)))
            return op;
    return -1;
}

static int parse_result(const char *s)
{
    for (int r = TRACE_R_OK; r <= TRACE_R_ERROR; r++)
        if (!strcmp(s, trace_result_name((trace_result)r)))
            return r;
    return -1;
}

static int cmd_encode(const args *a)
{
    if (!a->out)
        return usage_error("encode: -o TRACE is required%s", "");
    char shown[1024];
    text_printable(a->out, shown, sizeof(shown));
    FILE *f = fopen(a->out, "wb");
    if (!f) {
        fprintf(stderr, "%s: cannot create %s: %s\n", me, shown, strerror(errno));
        return 1;
    }
    trace_header h;
    trace_header_init(&h, a->pid, a->comm, 0, a->source);
    int bad = trace_write_header(f, &h);
    char line[512];
    for (unsigned long no = 1; !bad && fgets(line, sizeof(line), stdin); no++) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char op[32], res[32] = "ok";
        uint64_t time, addr, size;
        unsigned dev;
        int n = sscanf(line, "%" SCNu64 " %31s %u %" SCNi64 " %" SCNu64 " %31s",
                       &time, op, &dev, &addr, &size, res);
        if (n <= 0)
            continue; /* blank or comment */
        int o = n >= 5 ? parse_op(op) : -1, r = parse_result(res);
        if (o < 0 || r < 0 || dev > 255 || size > TRACE_SIZE_MAX) {
            fprintf(stderr, "%s: stdin line %lu: expected TIME OP DEVICE ADDR "
                    "SIZE [RESULT]\n", me, no);
            fclose(f);
            remove(a->out);
            return 1;
        }
        bad = trace_write_record(f, time, (trace_op)o, (trace_result)r, dev, addr, size);
    }
    if (fclose(f) || bad) {
        fprintf(stderr, "%s: cannot write %s: %s\n", me, shown, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- replay ----------------------------------------------------------------- */

static void print_oom(const replay_policy *p, const replay_result *r)
{
    char s[32], al[32], re[32], lf[32];
    printf("  %s: out of memory first at event %" PRIu64 " (%.3f s): %s asked, "
           "allocated %s, reserved %s, largest free block %s: %s\n",
           p->name, r->first_oom.index, (double)r->first_oom.time / 1e9,
           stats_fmt_bytes(r->first_oom.size, s, sizeof(s)),
           stats_fmt_bytes(r->first_oom.allocated, al, sizeof(al)),
           stats_fmt_bytes(r->first_oom.reserved, re, sizeof(re)),
           stats_fmt_bytes(r->first_oom.largest_free, lf, sizeof(lf)),
           r->first_oom.fragmentation ? "fragmentation (the bytes exist, no "
                                        "block or segment fits)"
                                      : "not enough memory");
}

/* Why a replay failed, in words. */
static const char *replay_error(int err)
{
    return err == -EOVERFLOW ? "the trace reserves more than 4 EiB at once: no device "
                               "holds that, so it is not a trace of one (refused)"
           : err == -ENOBUFS ? "out of host memory (the replay's own records: "
                               "its figures would be wrong, so none are printed)"
           : err == -EPROTO ? "the pool released, trimmed or stitched memory the "
                              "simulated device had not given it (a bug in the pool: "
                              "please report it with the trace)"
                            : strerror(-err);
}

static void json_result(const replay_policy *p, const replay_result *r, bool last)
{
    printf("    {\"policy\": \"%s\", \"peak_reserved\": %" PRIu64
           ", \"peak_allocated\": %" PRIu64 ", \"frag_at_peak\": %.4f, "
           "\"frag_mean\": %.4f, \"frag_max\": %.4f, \"fences\": %" PRIu64
           ", \"segments_reserved\": %" PRIu64 ", \"allocs\": %" PRIu64
           ", \"frees\": %" PRIu64 ", \"ooms\": %" PRIu64
           ", \"first_oom_event\": %" PRId64 ", \"first_oom_fragmentation\": %s"
           ", \"recorded_ooms_served\": %" PRIu64 ", \"unmatched_frees\": %" PRIu64
           ", \"reordered\": %" PRIu64 ", \"stitches\": %" PRIu64
           ", \"stitched_bytes\": %" PRIu64 ", \"fences_forced\": %" PRIu64
           ", \"end_allocated\": %" PRIu64 ", \"end_live_blocks\": %" PRIu64 "}%s\n",
           p->name, r->peak_reserved, r->peak_allocated, r->frag_at_peak,
           r->frag_mean, r->frag_max, r->fences, r->seg_reserves, r->allocs,
           r->frees, r->ooms, r->ooms ? (int64_t)r->first_oom.index : -1,
           r->ooms && r->first_oom.fragmentation ? "true" : "false",
           r->recorded_ooms_served, r->unmatched_frees, r->reordered, r->stitches, r->stitched_bytes,
           r->fences_forced, r->end_allocated,
           r->end_live_blocks, last ? "" : ",");
}

/* Splits a comma list of policy names; 0 or 2 (reported). */
static int policy_list(const char *list, const replay_policy **out, int *n)
{
    *n = 0;
    if (!*list) {
        for (const replay_policy *p; (p = replay_policy_at(*n)); (*n)++)
            out[*n] = p;
        return 0;
    }
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const replay_policy *p = replay_policy_find(tok);
        if (!p)
            return usage_error("unknown policy '%s' (best, strict, first, nosplit, none)", tok);
        if (*n < 16)
            out[(*n)++] = p;
    }
    return *n ? 0 : usage_error("--policy '%s' names no policy (best, strict, first, "
                                "nosplit, none)", list);
}

static int write_timeline(const char *path, const replay_result *r)
{
    char shown[1024];
    text_printable(path, shown, sizeof(shown));
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot create %s: %s\n", me, shown, strerror(errno));
        return 1;
    }
    fprintf(f, "time_ns,allocated,reserved,largest_free,fragmentation,recorded_reserved\n");
    for (uint64_t i = 0; i < r->nsamples; i++) {
        const replay_sample *s = &r->sample[i];
        fprintf(f, "%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%.4f,%" PRIu64 "\n",
                s->time, s->allocated, s->reserved, s->largest_free,
                stats_frag(s->largest_free, s->releasable, s->reserved - s->allocated),
                s->recorded_reserved);
    }
    if (fclose(f)) {
        fprintf(stderr, "%s: cannot write %s\n", me, shown);
        return 1;
    }
    return 0;
}

/* replay's table for device d: the trace's figures, one row per policy,
 * then what ran out of memory. */
static void text_device(const args *a, const trace *t, int d,
                        const replay_policy *const *pol, int np,
                        const replay_result *res)
{
    const replay_result *r0 = &res[0];
    char b1[32], b2[32], b3[32];
    uint64_t nalloc = 0, nfree = 0; /* the trace's, whatever the policy */
    for (size_t i = 0; i < t->n; i++) {
        if (trace_device(&t->rec[i]) != (unsigned)d ||
            trace_result_of(&t->rec[i]) != TRACE_R_OK)
            continue;
        nalloc += trace_op_of(&t->rec[i]) == TRACE_ALLOC;
        nfree += trace_op_of(&t->rec[i]) == TRACE_FREE;
    }
    printf("\ndevice %d: %" PRIu64 " allocations, %" PRIu64 " frees", d,
           nalloc, nfree);
    if (r0->recorded_peak_reserved)
        printf("; as recorded: peak reserved %s, %" PRIu64 " fences",
               stats_fmt_bytes(r0->recorded_peak_reserved, b1, sizeof(b1)),
               r0->recorded_fences);
    if (r0->recorded_ooms)
        printf(", %" PRIu64 " out-of-memory", r0->recorded_ooms);
    if (a->capacity || a->max_reserved)
        printf("\nreplayed with capacity %s, cap %s",
               a->capacity ? stats_fmt_bytes(a->capacity, b2, sizeof(b2)) : "unlimited",
               a->max_reserved ? stats_fmt_bytes(a->max_reserved, b3, sizeof(b3)) : "none");
    if (a->fence_lag) {
        printf("\nfences asynchronous, each done %.3f ms after it began unless forced; forced:",
               (double)a->fence_lag / 1e6);
        for (int k = 0; k < np; k++)
            printf(" %s %" PRIu64, pol[k]->name, res[k].fences_forced);
    }
    printf("\n%-8s %14s %14s %10s %10s %9s %9s %9s %7s\n", "policy",
           "peak reserved", "peak alloc", "frag@peak", "frag mean",
           "frag max", "fences", "segments", "OOM");
    for (int k = 0; k < np; k++) {
        const replay_result *r = &res[k];
        printf("%-8s %14s %14s %9.1f%% %9.1f%% %8.1f%% %9" PRIu64 " %9" PRIu64
               " %7" PRIu64 "\n", pol[k]->name,
               stats_fmt_bytes(r->peak_reserved, b1, sizeof(b1)),
               stats_fmt_bytes(r->peak_allocated, b2, sizeof(b2)),
               100 * r->frag_at_peak, 100 * r->frag_mean, 100 * r->frag_max,
               r->fences, r->seg_reserves,
               r->ooms + r->recorded_ooms - r->recorded_ooms_served);
    }
    for (int k = 0; k < np; k++)
        if (res[k].ooms)
            print_oom(pol[k], &res[k]);
    for (int k = 0; k < np; k++)
        if (res[k].recorded_ooms)
            printf("  %s: of the %" PRIu64 " requests that ran out of memory "
                   "when recorded, %" PRIu64 " would be served here; OOM counts "
                   "the other %" PRIu64 " with the %" PRIu64 " the replay fails "
                   "itself\n", pol[k]->name, res[k].recorded_ooms,
                   res[k].recorded_ooms_served,
                   res[k].recorded_ooms - res[k].recorded_ooms_served, res[k].ooms);
    if (r0->unmatched_frees)
        printf("  %" PRIu64 " frees of blocks allocated before the trace "
               "began (or not served in the replay) were skipped\n",
               r0->unmatched_frees);
}

/* replay's opening: the JSON object's first line, or the trace's line
 * above the tables. */
static void print_header(const args *a, const trace *t)
{
    double secs = t->n ? (double)(t->rec[t->n - 1].time - t->rec[0].time) / 1e9 : 0;
    char b1[32], name[1024], comm[sizeof(t->hdr.comm) + 1];
    if (a->json) {
        static char q[6 * 4096 + 3];
        stats_json_string(a->trace, q, sizeof(q));
        printf("{\"trace\": %s, \"records\": %zu, \"seconds\": %.3f, \"devices\": [\n", q, t->n, secs);
    } else {
        snprintf(comm, sizeof(comm), "%.*s", (int)sizeof(t->hdr.comm), t->hdr.comm);
        printf("%s: %zu records over %.3f s, pid %d (%s)%s\n",
               text_printable(a->trace, name, sizeof(name)), t->n, secs, t->hdr.pid,
               text_printable(comm, b1, sizeof(b1)),
               t->hdr.source == TRACE_SRC_TORCH ? ", converted from a PyTorch snapshot" : "");
    }
}

/* Replays device d under each of the np policies into res. 0, or 1
 * (reported; nothing left to free). */
static int run_policies(const args *a, const trace *t, int d,
                           const replay_policy *const *pol, int np, replay_result *res)
{
    for (int k = 0; k < np; k++) {
        replay_opts o = {.device = (unsigned)d, .capacity = a->capacity,
                         .max_reserved = a->max_reserved, .policy = pol[k],
                         .trim_unit = a->trim, .mid_set = a->mid_set,
                         .mid_max = a->mid_max, .fence_lag = a->fence_lag,
                         .stitch = a->stitch,
                         .samples = a->timeline && k == 0};
        int err = replay_run(t, &o, &res[k]);
        if (err) {
            fprintf(stderr, "%s: replay failed: %s\n", me, replay_error(err));
            for (int j = 0; j < k; j++)
                replay_result_free(&res[j]);
            return 1;
        }
    }
    return 0;
}

/* replay's JSON object for device d, after the previous device's unless
 * first. */
static void json_device(int d, bool first, const replay_policy *const *pol, int np,
                        const replay_result *res)
{
    const replay_result *r0 = &res[0];
    printf("%s  {\"device\": %d, \"recorded_peak_reserved\": %" PRIu64
           ", \"recorded_fences\": %" PRIu64 ", \"recorded_ooms\": %" PRIu64
           ", \"recorded_flushes\": %" PRIu64 ", \"policies\": [\n",
           first ? "" : ",\n", d, r0->recorded_peak_reserved,
           r0->recorded_fences, r0->recorded_ooms, r0->recorded_flushes);
    for (int k = 0; k < np; k++)
        json_result(pol[k], &res[k], k == np - 1);
    printf("  ]}");
}

/* Replays device d under every policy, prints its figures (first: the
 * first device printed) and writes --timeline's file. 0 or 1 (reported). */
static int report_device(const args *a, const trace *t, int d, bool first,
                         const replay_policy *const *pol, int np)
{
    replay_result res[16];
    if (run_policies(a, t, d, pol, np, res))
        return 1;
    if (a->json)
        json_device(d, first, pol, np, res);
    else
        text_device(a, t, d, pol, np, res);
    int rc = a->timeline ? write_timeline(a->timeline, &res[0]) : 0;
    for (int k = 0; k < np; k++)
        replay_result_free(&res[k]);
    return rc;
}

static int cmd_replay(const args *a)
{
    const replay_policy *pol[16];
    int np, rc;
    if (!a->trace)
        return usage_error("replay: no trace given%s", "");
    if ((rc = policy_list(a->policies, pol, &np)))
        return rc;
    trace t;
    uint64_t devs[4];
    if (load_devices(a, &t, devs))
        return 1;
    print_header(a, &t);
    bool first_dev = true;
    for (int d = 0; d < 256 && !rc; d++) {
        if (!has_dev(devs, d) || (a->device >= 0 && d != a->device))
            continue;
        rc = report_device(a, &t, d, first_dev, pol, np);
        first_dev = false;
    }
    if (a->json && !rc)
        printf("\n]}\n");
    else if (!a->json && !rc)
        for (int k = 0; k < np; k++)
            printf("%s%-8s %s\n", k ? "" : "\n", pol[k]->name, pol[k]->what);
    trace_free(&t);
    return rc;
}

/* ---- plot ------------------------------------------------------------------- */

/* plot's title: --title, else the program's name (or the trace's path,
 * either shown with control bytes as '?') with its pid (an imported
 * snapshot has no process: no pid) and device. */
static void plot_title(const args *a, const trace *t, int dev, char *title, size_t len)
{
    char who[1024], pid[32] = "";
    text_printable(t->hdr.comm[0] ? t->hdr.comm : a->trace, who, sizeof(who));
    if (t->hdr.pid)
        snprintf(pid, sizeof(pid), " (pid %d)", t->hdr.pid);
    if (a->title)
        snprintf(title, len, "%s", a->title);
    else
        snprintf(title, len, "%s%s, device %d: memory over time", who, pid, dev);
}

/* Writes the SVG to a->out ("-": stdout, and the line about it to
 * stderr). 0, or 1 with the reason said. */
static int plot_write(const args *a, const trace *t, const replay_opts *o,
                      const replay_result *r, int dev)
{
    char title[1200], pr[32], name[1024];
    plot_title(a, t, dev, title, sizeof(title));
    text_printable(a->out, name, sizeof(name));
    bool to_stdout = !strcmp(a->out, "-");
    FILE *f = to_stdout ? stdout : fopen(a->out, "w");
    if (!f || plot_svg(f, t, o, r, title, a->by_event) ||
        (to_stdout ? fflush(f) : fclose(f))) {
        fprintf(stderr, "%s: cannot write %s: %s\n", me, name, strerror(errno));
        return 1;
    }
    fprintf(to_stdout ? stderr : stdout, "%s: device %d, %zu events under %s: peak reserved "
            "%s%s\n", name, dev, t->n, o->policy->name,
            stats_fmt_bytes(r->peak_reserved, pr, sizeof(pr)),
            r->ooms ? ", out of memory marked" : "");
    return 0;
}

static int cmd_plot(const args *a)
{
    const replay_policy *pol[16];
    int np, rc;
    if (!a->trace || !a->out)
        return usage_error("plot: usage: plot TRACE -o OUT.svg%s", "");
    if ((rc = policy_list(a->policies[0] ? a->policies : "best", pol, &np)))
        return rc;
    if (np > 1)
        return usage_error("plot draws one policy, not '%s' (replay compares several)",
                           a->policies);
    trace t;
    uint64_t devs[4];
    if (load_devices(a, &t, devs))
        return 1;
    int dev = a->device; /* or the first device in the trace */
    for (int d = 0; dev < 0 && d < 256; d++)
        if (has_dev(devs, d))
            dev = d;
    if (dev < 0) {
        char shown[1024];
        fprintf(stderr, "%s: %s has no records\n", me,
                text_printable(a->trace, shown, sizeof(shown)));
        trace_free(&t);
        return 1;
    }
    replay_opts o = {.device = (unsigned)dev, .capacity = a->capacity,
                     .max_reserved = a->max_reserved, .policy = pol[0],
                     .trim_unit = a->trim, .mid_set = a->mid_set,
                     .mid_max = a->mid_max, .fence_lag = a->fence_lag,
                     .stitch = a->stitch, .samples = true};
    replay_result r;
    int err = replay_run(&t, &o, &r);
    if (err) {
        fprintf(stderr, "%s: replay failed: %s\n", me, replay_error(err));
        trace_free(&t);
        return 1;
    }
    rc = plot_write(a, &t, &o, &r, dev);
    replay_result_free(&r);
    trace_free(&t);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: cupool-trace replay|plot|dump|encode ... (see "
                "'cupool --help')\n");
        return 2;
    }
    if (!help_of(argv[1]))
        return usage_error("unknown command '%s'", argv[1]);
    args a;
    int rc = parse(argv[1], argc - 2, argv + 2, &a);
    if (rc == 3)
        return fputs(help_of(argv[1])->text, stdout) < 0;
    if (rc)
        return rc;
    if (!strcmp(argv[1], "replay"))
        return cmd_replay(&a);
    if (!strcmp(argv[1], "plot"))
        return cmd_plot(&a);
    if (!strcmp(argv[1], "dump"))
        return cmd_dump(&a);
    if (!strcmp(argv[1], "encode"))
        return cmd_encode(&a);
    return usage_error("unknown command '%s'", argv[1]);
}
