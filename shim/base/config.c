/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.c - the option table and its strict parsers.
 *
 * Each option is one row: name, kind, where it lands in shim_config, its
 * default (as text, parsed by the same parser as user input, so the table
 * cannot disagree with the code) and its meaning.
 */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "groupseg.h"
#include "stats.h"

enum opt_kind {
    OPT_BOOL, OPT_FORMAT, OPT_COUNT, OPT_PERCENT, OPT_SIZE, OPT_CAP, OPT_THRESHOLD, OPT_FENCE, OPT_SIGNAL,
    OPT_PATH, OPT_LOG, OPT_SWITCH, OPT_DURATION
};

typedef struct option {
    const char *name;
    enum opt_kind kind;
    size_t off;
    const char *def;
    const char *help;
} option;

#define F(field) offsetof(shim_config, field)

static const option options[] = {
    {"CUPOOL_DISABLE", OPT_BOOL, F(disable), "0",
     "1 makes every call a pass-through to CUDA (for A/B runs)"},
    {"CUPOOL_MAX_RESERVED", OPT_CAP, F(max_reserved), "none",
     "cap on bytes reserved per device (SIZE or N%); "
     "CUPOOL_MAX_RESERVED_<N> overrides it for device N"},
    {"CUPOOL_RELEASE_THRESHOLD", OPT_THRESHOLD, F(release_threshold),
     "unlimited", "idle cached bytes kept per device; fully free segments "
     "above it go back to the driver"},
    {"CUPOOL_FENCE", OPT_FENCE, F(fence), "poll",
     "stream safety on reuse: barrier, poll, sync or none"},
    {"CUPOOL_FENCE_INTERVAL", OPT_COUNT, F(pool.fence_interval), "64",
     "at most one fence per this many allocations to reach a better-fitting "
     "block freed since the last fence (1 = always take the best fit)"},
    {"CUPOOL_FENCE_SLACK", OPT_PERCENT, F(pool.fence_slack), "0",
     "CUPOOL_FENCE=poll: rather than make a stream wait for another's work "
     "to reuse a better-fitting block, take a free block up to this many "
     "percent larger than the request (more overlap, more memory)"},
    {"CUPOOL_SHARDS", OPT_COUNT, F(shards), "16",
     "pools per device for small requests, one per thread round robin, so "
     "threads do not queue on one lock (1 to 64; 1 = one pool)"},
    {"CUPOOL_VMM", OPT_BOOL, F(vmm), "0",
     "1 builds segments from the driver's virtual memory calls, 2 MiB "
     "granules the pool can give back from inside a segment (under the cap, "
     "on a flush); blocks in them are shared with other processes under "
     "cupool only"},
    {"CUPOOL_STITCH", OPT_SWITCH, F(stitch), "auto",
     "1 (with VMM segments, which it turns on) serves a large request that "
     "no free block fits by mapping free units (CUPOOL_VMM_UNIT), and fresh "
     "ones for the rest, into one new range, rather than growing by all of it; "
     "auto = on when PyTorch's caching allocator is off "
     "(PYTORCH_NO_CUDA_MEMORY_CACHING=1, as cupool run --torch sets), so "
     "that cupool serves every tensor"},
    {"CUPOOL_VMM_UNIT", OPT_SIZE, F(vmm_unit), "0",
     "VMM segments are built of physical allocations this large (a "
     "power-of-two multiple of the device's granularity); the pool gives "
     "back and stitches whole ones. 0 = the granularity (2 MiB), or 8M "
     "under CUPOOL_STITCH without a cap (a stitch costs one mapping per "
     "unit)"},
    {"CUPOOL_CUPTI", OPT_SWITCH, F(cupti), "auto",
     "1 counts, through CUPTI, the driver calls that may give the GPU work, "
     "and skips a fence when none came since the last one; with poll, leaves "
     "idle streams and NCCL's streams out of fences while their work touches "
     "nothing freed; auto does so from the 8th fence after the program's first "
     "NCCL call on; "
     "either gives CUPTI up when the program (a profiler) asks for it; 0 = never"},
    {"CUPOOL_CUPTI_LIB", OPT_PATH, F(cupti_lib), "",
     "path of libcupti for CUPOOL_CUPTI; empty = search the usual places"},
    {"CUPOOL_FLUSH_SIGNAL", OPT_SIGNAL, F(flush_signal), "USR1",
     "signal that returns every cached segment to the driver, or none"},
    {"CUPOOL_STATS_SIGNAL", OPT_SIGNAL, F(stats_signal), "USR2",
     "signal that writes a statistics line, or none"},
    {"CUPOOL_STATS_FILE", OPT_PATH, F(stats_file), "",
     "file for statistics (appended; %p is the pid); empty = stderr"},
    {"CUPOOL_TRACE", OPT_PATH, F(trace), "",
     "record every allocation event to this file (%p is the pid) for "
     "'cupool replay' and 'cupool plot'; empty = off"},
    {"CUPOOL_TRACE_MAX", OPT_SIZE, F(trace_max), "4G",
     "largest trace file: recording stops there (with a warning; the file "
     "holds every event before) so that a long run cannot fill the disk; "
     "0 = no limit"},
    {"CUPOOL_STATS_FORMAT", OPT_FORMAT, F(stats_json), "table",
     "format of the statistics dump: table or json (one line)"},
    {"CUPOOL_STATS_AT_EXIT", OPT_BOOL, F(stats_at_exit), "0",
     "1 dumps the statistics when the program exits"},
    {"CUPOOL_GROUP", OPT_PATH, F(group), "",
     "processes of this user with the same NAME share one budget per device "
     "(CUPOOL_GROUP_MAX_RESERVED) and flush for each other before one is "
     "refused; empty = none"},
    {"CUPOOL_GROUP_MAX_RESERVED", OPT_CAP, F(group_max), "none",
     "the budget per device of CUPOOL_GROUP, set by its first member: a size "
     "or N% of device memory; CUPOOL_GROUP_MAX_RESERVED_<N> overrides it for "
     "device N"},
    {"CUPOOL_GROUP_WAIT", OPT_DURATION, F(group_wait_ms), "10m",
     "how long a member of CUPOOL_GROUP refused because the other members' "
     "memory is in use waits for its turn (first come, first served) before "
     "its allocation fails; 0 = it fails once their flushes are answered"},
    {"CUPOOL_PAUSE_CALL_WAIT", OPT_DURATION, F(pause_call_wait_ms), "5s",
     "how long cupool pause's own move waits for the program's threads to "
     "leave the CUDA calls they are in (a long copy, a module load) before it "
     "gives up and leaves the pause to the driver"},
    {"CUPOOL_FRAMEWORK_FLUSH", OPT_BOOL, F(framework_flush), "1",
     "a flush first asks a Python program's frameworks to release their "
     "caches, from a thread of cupool's holding the interpreter's lock "
     "(torch.cuda.empty_cache, CuPy's pools), and "
     "statistics carry PyTorch's own figures; 0 = cupool's own cache and "
     "figures only"},
    {"CUPOOL_LIVE_PAGE", OPT_BOOL, F(live_page), "1",
     "keep a live statistics page for 'cupool stat' (0 = none)"},
    {"CUPOOL_PAGE_DIR", OPT_PATH, F(page_dir), "",
     "directory of the live pages, for 'cupool stat' too; empty = /dev/shm "
     "(/tmp without it)"},
    {"CUPOOL_LOG", OPT_LOG, F(log), "warn",
     "messages shown: off, error, warn, info or debug"},
    {"CUPOOL_SMALL_MAX", OPT_SIZE, F(pool.small_max), "1M",
     "largest request served from small segments"},
    {"CUPOOL_SMALL_SEGMENT", OPT_SIZE, F(pool.small_segment), "8M",
     "size of a small segment"},
    {"CUPOOL_LARGE_ROUND", OPT_SIZE, F(pool.large_round), "2M",
     "large segments round up to a multiple of this"},
    {"CUPOOL_MID_MAX", OPT_SIZE, F(pool.mid_max), "10M",
     "large requests up to this share segments of CUPOOL_MID_SEGMENT bytes "
     "(0 = each gets its own)"},
    {"CUPOOL_MID_SEGMENT", OPT_SIZE, F(pool.mid_segment), "20M",
     "size of a segment for requests up to CUPOOL_MID_MAX"},
    {"CUPOOL_LARGE_SPLIT_MIN", OPT_SIZE, F(pool.large_split_min), "1M",
     "a large block is split only if more than this remains"},
    {"CUPOOL_MAX_SPLIT", OPT_SIZE, F(pool.max_split), "0",
     "blocks this large are never split (0 = off)"},
    {"CUPOOL_OVERSIZE_SLACK", OPT_SIZE, F(pool.oversize_slack), "20M",
     "how much larger than its request an unsplit block may be"},
};

enum { NOPTIONS = sizeof(options) / sizeof(options[0]) };

static const char *const fence_names[] = {"barrier", "sync", "none", "poll", NULL};
static const char *const log_names[] = {"off", "error", "warn", "info",
                                        "debug", NULL};
static const char *const format_names[] = {"table", "json", NULL};

static const char *expected(enum opt_kind kind)
{
    switch (kind) {
    case OPT_BOOL: return "1, 0, true, false, on, off, yes or no";
    case OPT_COUNT: return "a whole number from 1 up";
    case OPT_PERCENT: return "a whole number of percent from 0 up, e.g. 0 or 100";
    case OPT_FORMAT: return "table or json";
    case OPT_SIZE: return "bytes with an optional K, M, G or T suffix "
                          "(KiB, MB... all binary), e.g. 512M or 20GiB";
    case OPT_CAP: return "none, a size such as 20G or 512MiB, or a "
                         "percentage of device memory such as 50%";
    case OPT_THRESHOLD: return "unlimited or a size such as 2G";
    case OPT_FENCE: return "barrier, poll, sync or none";
    case OPT_SIGNAL: return "none, HUP, USR1, USR2, WINCH or RTMIN+N";
    case OPT_PATH: return "a path shorter than 512 bytes";
    case OPT_LOG: return "off, error, warn, info or debug";
    case OPT_SWITCH: return "auto, or 1, 0, true, false, on, off, yes or no";
    case OPT_DURATION: return "a time such as 600 (seconds), 30s, 500ms, 10m or 1h";
    }
    return "";
}

int shim_parse_cap(const char *s, shim_cap *out)
{
    if (!s)
        return -EINVAL;
    if (!strcasecmp(s, "none") || !strcmp(s, "0")) {
        *out = (shim_cap){0, 0};
        return 0;
    }
    size_t n = strlen(s);
    if (n >= 2 && s[n - 1] == '%') {
        unsigned pct = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            if (!isdigit((unsigned char)s[i]) || pct > 100)
                return -EINVAL;
            pct = pct * 10 + (unsigned)(s[i] - '0');
        }
        if (pct < 1 || pct > 100)
            return -EINVAL;
        *out = (shim_cap){0, pct};
        return 0;
    }
    uint64_t bytes;
    if (stats_parse_size(s, &bytes))
        return -EINVAL;
    *out = (shim_cap){bytes, 0};
    return 0;
}

int shim_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "true", "on", "yes"};
    static const char *const no[] = {"0", "false", "off", "no"};
    for (int i = 0; s && i < 4; i++) {
        if (!strcasecmp(s, yes[i]))
            return *out = true, 0;
        if (!strcasecmp(s, no[i]))
            return *out = false, 0;
    }
    return -EINVAL;
}

static const struct { const char *name; int sig; } signals[] = {
    {"HUP", SIGHUP}, {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"WINCH", SIGWINCH},
};

int shim_parse_signal(const char *s, int *out)
{
    if (!s)
        return -EINVAL;
    if (!strcasecmp(s, "none") || !strcasecmp(s, "off")) {
        *out = 0;
        return 0;
    }
    if (!strncasecmp(s, "SIG", 3))
        s += 3;
    for (size_t i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
        if (!strcasecmp(s, signals[i].name)) {
            *out = signals[i].sig;
            return 0;
        }
    }
    if (!strncasecmp(s, "RTMIN+", 6) && isdigit((unsigned char)s[6])) {
        uint64_t n;
        if (stats_parse_size(s + 6, &n) || !isdigit((unsigned char)s[strlen(s) - 1]) ||
            n > (uint64_t)(SIGRTMAX - SIGRTMIN))
            return -EINVAL;
        *out = SIGRTMIN + (int)n;
        return 0;
    }
    return -EINVAL;
}

int shim_path_expand(const char *pattern, int pid, char *out, size_t len)
{
    size_t n = 0;
    for (const char *c = pattern; *c; c++) {
        int w;
        if (c[0] == '%' && c[1] == 'p') {
            w = snprintf(out + n, len - n, "%d", pid);
            c++;
        } else {
            w = snprintf(out + n, len - n, "%c", *c);
        }
        if (w < 0 || (size_t)w >= len - n)
            return -1;
        n += (size_t)w;
    }
    if (len == 0)
        return -1;
    out[n] = '\0';
    return 0;
}

static int parse_name(const char *s, const char *const *names, int *out)
{
    for (int i = 0; s && names[i]; i++) {
        if (!strcasecmp(s, names[i])) {
            *out = i;
            return 0;
        }
    }
    return -EINVAL;
}

int shim_parse_duration(const char *s, uint64_t *ms)
{
    static const struct { const char *unit; uint64_t ms; } units[] = {
        {"", 1000}, {"s", 1000}, {"ms", 1}, {"m", 60000}, {"h", 3600000}};
    if (!isdigit((unsigned char)*s))
        return -EINVAL;
    uint64_t n = 0;
    for (; isdigit((unsigned char)*s); s++) {
        if (n > (UINT64_MAX - 9) / 10)
            return -EINVAL;
        n = n * 10 + (uint64_t)(*s - '0');
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(s, units[i].unit))
            continue;
        if (n > UINT64_MAX / 1000 / units[i].ms)
            return -EINVAL; /* ms kept well inside 64 bits */
        *ms = n * units[i].ms;
        return 0;
    }
    return -EINVAL;
}

/* Parses s into the option's field. 0 or -EINVAL (field untouched). */
static int parse_option(const option *o, const char *s, shim_config *c)
{
    void *field = (char *)c + o->off;
    uint64_t v;
    int i, err;
    switch (o->kind) {
    case OPT_BOOL:
        return shim_parse_bool(s, field);
    case OPT_FORMAT:
        if ((err = parse_name(s, format_names, &i)) == 0)
            *(bool *)field = i == 1;
        return err;
    case OPT_COUNT:
    case OPT_PERCENT:
        for (const char *d = s; *d; d++)
            if (!isdigit((unsigned char)*d))
                return -EINVAL;
        if ((err = stats_parse_size(s, &v)) == 0 && v == 0 && o->kind == OPT_COUNT)
            err = -EINVAL;
        if (!err)
            *(size_t *)field = (size_t)v;
        return err;
    case OPT_SIZE:
        if ((err = stats_parse_size(s, &v)) == 0)
            *(size_t *)field = (size_t)v;
        return err;
    case OPT_CAP:
        return shim_parse_cap(s, field);
    case OPT_THRESHOLD:
        if (!strcasecmp(s, "unlimited"))
            return *(uint64_t *)field = UINT64_MAX, 0;
        return stats_parse_size(s, field);
    case OPT_FENCE: /* each enum written as itself, never through an int */
        if ((err = parse_name(s, fence_names, &i)) == 0)
            *(shim_fence_mode *)field = (shim_fence_mode)i;
        return err;
    case OPT_LOG:
        if ((err = parse_name(s, log_names, &i)) == 0)
            *(shim_log_level *)field = (shim_log_level)i;
        return err;
    case OPT_SWITCH: {
        bool on;
        if (!strcasecmp(s, "auto"))
            return *(shim_switch *)field = SHIM_AUTO, 0;
        if ((err = shim_parse_bool(s, &on)) == 0)
            *(shim_switch *)field = on ? SHIM_ON : SHIM_OFF;
        return err;
    }
    case OPT_SIGNAL:
        return shim_parse_signal(s, field);
    case OPT_DURATION:
        return shim_parse_duration(s, field);
    case OPT_PATH:
        if (strlen(s) >= SHIM_PATH_MAX)
            return -EINVAL;
        strcpy(field, s);
        return 0;
    }
    return -EINVAL;
}

static void complain(shim_warn_fn warn, const char *name, const char *value,
                     enum opt_kind kind, const char *def)
{
    char line[512];
    char shown[80];
    snprintf(line, sizeof(line), "%s=%s is invalid (expected %s); using %s",
             name, text_printable(value, shown, sizeof(shown)), expected(kind),
             *def ? def : "the default (empty)");
    warn(line);
}

/* prefix<N> for each device N: caps[N] and has[N]. */
static int load_device_caps(const char *prefix, shim_cap *caps, bool *has,
                            shim_getenv_fn get, shim_warn_fn warn)
{
    int bad = 0;
    for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
        char name[48];
        snprintf(name, sizeof(name), "%s%d", prefix, d);
        const char *v = get(name);
        if (!v)
            continue;
        if (shim_parse_cap(v, &caps[d]) == 0) {
            has[d] = true;
        } else {
            char all[48]; /* the option for every device, which it falls back on */
            snprintf(all, sizeof(all), "%.*s", (int)strlen(prefix) - 1, prefix);
            complain(warn, name, v, OPT_CAP, all);
            bad++;
        }
    }
    return bad;
}

/* The largest segment size or rounding accepted: a segment larger than
 * this fails on a device with room for the program's data. */
#define SEGMENT_MAX ((size_t)1 << 30)

/* Resets a size option to its table default. */
static void reset_default(shim_config *c, const char *name)
{
    for (int i = 0; i < NOPTIONS; i++)
        if (!strcmp(options[i].name, name))
            parse_option(&options[i], options[i].def, c);
}

/* A byte cap below one small segment refuses every allocation. */
static int check_cap(shim_cap *cap, const char *name, const shim_config *c,
                     shim_warn_fn warn)
{
    if (cap->percent || !cap->bytes || cap->bytes >= c->pool.small_segment)
        return 0;
    char line[256];
    snprintf(line, sizeof(line), "%s=%lu bytes is below one small segment "
             "(CUPOOL_SMALL_SEGMENT, %zu bytes): every allocation would fail; "
             "using none", name, (unsigned long)cap->bytes, c->pool.small_segment);
    warn(line);
    *cap = (shim_cap){0, 0};
    return 1;
}

/* Sizes that would make segments over SEGMENT_MAX: each warned about and
 * reset to its default. Returns how many. */
static int check_segment_sizes(shim_config *c, shim_warn_fn warn)
{
    int bad = 0;
    static const char *const sized[] = {"CUPOOL_SMALL_SEGMENT", "CUPOOL_LARGE_ROUND",
                                        "CUPOOL_SMALL_MAX", "CUPOOL_LARGE_SPLIT_MIN",
                                        "CUPOOL_MID_MAX", "CUPOOL_MID_SEGMENT"};
    size_t *const field[] = {&c->pool.small_segment, &c->pool.large_round,
                             &c->pool.small_max, &c->pool.large_split_min,
                             &c->pool.mid_max, &c->pool.mid_segment};
    for (int i = 0; i < 6; i++) {
        if (*field[i] <= SEGMENT_MAX)
            continue;
        char line[160];
        snprintf(line, sizeof(line), "%s is above 1 GiB (segments that large fail "
                 "on devices with room); using the default", sized[i]);
        warn(line);
        reset_default(c, sized[i]);
        bad++;
    }
    return bad;
}

/* A group name the group segment cannot be named after: warned about, no
 * group. 0 or 1. */
static int check_group_name(shim_config *c, shim_warn_fn warn)
{
    if (!*c->group || group_name_ok(c->group))
        return 0;
    char line[160], shown[80];
    snprintf(line, sizeof(line), "CUPOOL_GROUP=%s is invalid (expected 1 to 64 of "
             "A-Z a-z 0-9 . _ -, not starting with .); using none",
             text_printable(c->group, shown, sizeof(shown)));
    warn(line);
    c->group[0] = '\0';
    return 1;
}

/* One signal for both flush and statistics: both back to their defaults.
 * 0 or 1. */
static int check_signals(shim_config *c, shim_warn_fn warn)
{
    if (!c->flush_signal || c->flush_signal != c->stats_signal)
        return 0;
    warn("CUPOOL_FLUSH_SIGNAL and CUPOOL_STATS_SIGNAL name the same "
         "signal; using USR1 and USR2");
    c->flush_signal = SIGUSR1;
    c->stats_signal = SIGUSR2;
    return 1;
}

/* More shards than SHIM_SHARDS_MAX: the default, 16. 0 or 1. */
static int check_shards(shim_config *c, shim_warn_fn warn)
{
    if (c->shards <= SHIM_SHARDS_MAX)
        return 0;
    warn("CUPOOL_SHARDS is above 64; using 16");
    c->shards = 16;
    return 1;
}

/* The fence's companions: slack at most 1000 percent and only under poll;
 * CUPTI off under CUPOOL_FENCE=none. Returns the problems warned about. */
static int check_fence_options(shim_config *c, shim_warn_fn warn)
{
    int bad = 0;
    if (c->pool.fence_slack > 1000) {
        warn("CUPOOL_FENCE_SLACK is above 1000 percent; using 1000");
        c->pool.fence_slack = 1000;
        bad++;
    }
    if (c->pool.fence_slack && c->fence != SHIM_FENCE_POLL) {
        warn("CUPOOL_FENCE_SLACK applies to CUPOOL_FENCE=poll only; ignored");
        c->pool.fence_slack = 0;
        bad++;
    }
    if (c->cupti != SHIM_OFF && c->fence == SHIM_FENCE_NONE) {
        /* It would take CUPTI from the profilers for nothing. */
        if (c->cupti == SHIM_ON) {
            warn("CUPOOL_CUPTI=1 has no fence to skip under CUPOOL_FENCE=none; "
                 "leaving CUPTI alone");
            bad++;
        }
        c->cupti = SHIM_OFF;
    }
    return bad;
}

/* Pool thresholds the pool refuses together: all back to the pool's
 * defaults. 0 or 1. */
static int check_pool_thresholds(shim_config *c, shim_warn_fn warn)
{
    if (!pool_config_validate(&c->pool))
        return 0;
    warn("the pool thresholds do not fit together (all multiples of 512, "
         "CUPOOL_SMALL_MAX <= CUPOOL_SMALL_SEGMENT, CUPOOL_MID_MAX <= "
         "CUPOOL_MID_SEGMENT, CUPOOL_MAX_SPLIT 0 or above "
         "CUPOOL_SMALL_SEGMENT, CUPOOL_OVERSIZE_SLACK >= CUPOOL_LARGE_ROUND); "
         "using the defaults");
    pool_config_default(&c->pool);
    return 1;
}

/* check_cap on every cap: the process's and the group's, then each
 * device's pair. Returns how many were dropped. */
static int check_caps(shim_config *c, shim_warn_fn warn)
{
    int bad = 0;
    bad += check_cap(&c->max_reserved, "CUPOOL_MAX_RESERVED", c, warn);
    bad += check_cap(&c->group_max, "CUPOOL_GROUP_MAX_RESERVED", c, warn);
    for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
        char name[48];
        snprintf(name, sizeof(name), "CUPOOL_MAX_RESERVED_%d", d);
        if (c->has_dev_cap[d])
            bad += check_cap(&c->max_reserved_dev[d], name, c, warn);
        snprintf(name, sizeof(name), "CUPOOL_GROUP_MAX_RESERVED_%d", d);
        if (c->has_group_dev[d])
            bad += check_cap(&c->group_max_dev[d], name, c, warn);
    }
    return bad;
}

/* Checks that options agree with each other; resets what cannot stand.
 * The order matters: the caps are checked against the small segment the
 * pool checks left. */
static int cross_check(shim_config *c, shim_warn_fn warn)
{
    int bad = 0;
    bad += check_segment_sizes(c, warn);
    bad += check_group_name(c, warn);
    bad += check_signals(c, warn);
    bad += check_shards(c, warn);
    bad += check_fence_options(c, warn);
    bad += check_pool_thresholds(c, warn);
    bad += check_caps(c, warn);
    return bad;
}

int shim_config_load(shim_config *c, shim_getenv_fn get, shim_warn_fn warn)
{
    memset(c, 0, sizeof(*c));
    pool_config_default(&c->pool);
    for (int i = 0; i < NOPTIONS; i++)
        parse_option(&options[i], options[i].def, c);
    int bad = 0;
    for (int i = 0; i < NOPTIONS; i++) {
        const char *v = get(options[i].name);
        if (v && parse_option(&options[i], v, c)) {
            complain(warn, options[i].name, v, options[i].kind, options[i].def);
            bad++;
        }
    }
    bad += load_device_caps("CUPOOL_MAX_RESERVED_", c->max_reserved_dev, c->has_dev_cap,
                            get, warn);
    bad += load_device_caps("CUPOOL_GROUP_MAX_RESERVED_", c->group_max_dev,
                            c->has_group_dev, get, warn);
    return bad + cross_check(c, warn);
}

uint64_t shim_cap_bytes(const shim_cap *cap, uint64_t total)
{
    if (cap->percent)
        return total / 100 * cap->percent + total % 100 * cap->percent / 100;
    return cap->bytes;
}

/* The variables cupool's own tools read (scripts/cupool), not options. */
static const char *const tool_names[] = {"CUPOOL_LIB", "CUPOOL_TRACE_BIN"};

/* Levenshtein distance between a and b, both under 64 characters, else a
 * large number. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), row[64];
    if (la >= 64 || lb >= 64)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Whether name (up to len characters) is an option, a device's cap or a
 * tool's variable. */
static bool known_name(const char *name, size_t len)
{
    for (int i = 0; i < NOPTIONS; i++)
        if (strlen(options[i].name) == len && !strncmp(options[i].name, name, len))
            return true;
    for (size_t i = 0; i < sizeof(tool_names) / sizeof(tool_names[0]); i++)
        if (strlen(tool_names[i]) == len && !strncmp(tool_names[i], name, len))
            return true;
    static const char *const per_device[] = {"CUPOOL_MAX_RESERVED_",
                                             "CUPOOL_GROUP_MAX_RESERVED_"};
    for (int p = 0; p < 2; p++) {
        size_t k = strlen(per_device[p]), i = k;
        if (len <= k || len > k + 2 || strncmp(name, per_device[p], k))
            continue;
        while (i < len && isdigit((unsigned char)name[i]))
            i++;
        if (i == len && strtol(name + k, NULL, 10) < SHIM_MAX_DEVICES)
            return true;
    }
    return false;
}

int shim_config_unknown(char *const *env, shim_warn_fn warn)
{
    int bad = 0;
    for (; env && *env; env++) {
        const char *eq = strchr(*env, '=');
        size_t len = eq ? (size_t)(eq - *env) : strlen(*env);
        if (strncmp(*env, "CUPOOL_", 7) || known_name(*env, len))
            continue;
        char name[64], shown[64];
        snprintf(name, sizeof(name), "%.*s", (int)(len < 63 ? len : 63), *env);
        const char *near = NULL;
        size_t best = 3; /* farther than 2 edits: no suggestion */
        for (int i = 0; i < NOPTIONS; i++) {
            size_t d = distance(name, options[i].name);
            if (d < best)
                best = d, near = options[i].name;
        }
        char line[256];
        snprintf(line, sizeof(line), "%s is not a cupool option%s%s%s; using "
                 "nothing from it ('cupool options' lists the options)", text_printable(name, shown, sizeof(shown)),
                 near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
        warn(line);
        bad++;
    }
    return bad;
}

const char *shim_env(const char *name) { return secure_getenv(name); }

bool shim_stitch_wanted(const shim_config *c, shim_getenv_fn get)
{
    /* PyTorch's own test (c10::utils::check_env): "1" turns its cache off;
     * "0" and anything else leave it on. */
    const char *v = c->stitch == SHIM_AUTO ? get("PYTORCH_NO_CUDA_MEMORY_CACHING") : NULL;
    return c->stitch == SHIM_ON || (v && !strcmp(v, "1"));
}

shim_log_level shim_config_log_level(shim_getenv_fn get)
{
    shim_config c;
    memset(&c, 0, sizeof(c));
    const char *v = get("CUPOOL_LOG");
    for (int i = 0; i < NOPTIONS; i++)
        if (options[i].kind == OPT_LOG &&
            (!v || parse_option(&options[i], v, &c)))
            parse_option(&options[i], options[i].def, &c);
    return c.log;
}

void shim_config_describe(int fd)
{
    for (int i = 0; i < NOPTIONS; i++)
        dprintf(fd, "%-26s %-10s %s\n", options[i].name,
                *options[i].def ? options[i].def : "(empty)", options[i].help);
}

int shim_option_is_flag(const char *name)
{
    for (int i = 0; i < NOPTIONS; i++)
        if (!strcmp(options[i].name, name))
            return options[i].kind == OPT_BOOL || options[i].kind == OPT_SWITCH;
    return -1;
}
