/* SPDX-License-Identifier: Apache-2.0 */
/*
 * format.c - the human table, the detail listing, JSON and Prometheus,
 * every one generated from STATS_DEVICE_FIELDS / STATS_PROCESS_FIELDS.
 * Plain snprintf into the caller's buffer: no allocation.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "groupseg.h"
#include "stats.h"

typedef struct out { char *buf; size_t len, n; } out;

static void put(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->n < o->len ? o->buf + o->n : NULL,
                      o->n < o->len ? o->len - o->n : 0, fmt, ap);
    va_end(ap);
    if (k > 0)
        o->n += (size_t)k;
}

/* Appends the string s as it is: no format to parse (the Prometheus
 * output is many thousands of these a scrape). */
static void put_str(out *o, const char *s)
{
    size_t k = strlen(s);
    if (o->n < o->len)
        memcpy(o->buf + o->n, s, k < o->len - o->n ? k : o->len - o->n);
    o->n += k;
}

static size_t done(out *o)
{
    if (o->len)
        o->buf[o->n < o->len ? o->n : o->len - 1] = '\0';
    return o->n;
}

void stats_device_from_pool(stats_device *d, int device, const pool_stats *p)
{
    d->device = device;
#define SKIP(name, unit, kind, help)
#define COPY(X, name, from, unit, kind, help) d->name = p->from;
    STATS_DEVICE_ROWS(SKIP, COPY)
#undef SKIP
#undef COPY
}

double stats_frag(uint64_t largest_free, uint64_t releasable, uint64_t cached)
{
    if (!cached)
        return 0.0;
    uint64_t one = largest_free > releasable ? largest_free : releasable;
    double f = 1.0 - (double)one / (double)cached;
    return f < 0 ? 0.0 : f;
}

double stats_fragmentation(const stats_device *d)
{
    return stats_frag(d->largest_free, d->releasable, d->cached);
}

bool stats_oom_is_fragmentation(uint64_t size, uint64_t allocated,
                                uint64_t cached, uint64_t limit)
{
    return cached >= size ||
           (cached && limit > allocated && limit - allocated >= size);
}

const char *stats_fmt_bytes(uint64_t n, char *buf, size_t len)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
    if (n == STATS_UNKNOWN) {
        snprintf(buf, len, "-");
        return buf;
    }
    if (n < 1024) {
        snprintf(buf, len, "%lu B", (unsigned long)n);
        return buf;
    }
    double v = (double)n / 1024;
    int u = 0;
    while (v >= 1024 && u < 3) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, "%.2f %s", v, unit[u]);
    return buf;
}

int stats_parse_size(const char *s, uint64_t *size)
{
    if (!s || !isdigit((unsigned char)*s))
        return -EINVAL;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EINVAL;
        v = v * 10 + d;
    }
    int shift = 0;
    switch (toupper((unsigned char)*s)) {
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    }
    if (shift) {
        s++;
        if (*s == 'i' || *s == 'I')
            s++;
    }
    if (*s == 'B' || *s == 'b')
        s++;
    if (*s || (shift && v > (UINT64_MAX >> shift)))
        return -EINVAL;
    *size = v << shift;
    return 0;
}

const char *stats_printable(const char *s, char *buf, size_t len)
{
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}

/* ---- table --------------------------------------------------------------- */

/* n in at most 6 characters for the table: three significant digits and a
 * binary unit ("146M", "55.9M", "4.00G", "512K", "0"); "-" when unknown. */
static const char *fmt_short(uint64_t n, char *buf, size_t len)
{
    static const char unit[] = "BKMGTPE";
    if (n == STATS_UNKNOWN)
        return snprintf(buf, len, "-"), buf;
    double v = (double)n;
    int u = 0;
    while (v >= 999.5 && u < 6) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%lu", (unsigned long)n);
    else
        snprintf(buf, len, v < 9.995 ? "%.2f%c" : v < 99.95 ? "%.1f%c" : "%.0f%c", v, unit[u]);
    return buf;
}

/* 80 columns: what tells a leak (ALLOC grows) from a cache (CACHED) from
 * memory no pool gives back (OUTSIDE, which includes bytes passed on).
 * Every other field is in the detail, JSON and Prometheus forms. */
/* Under a process's rows, PyTorch's own figures per device where the
 * process has them: what sits in its cache, before anyone flushes. */
static void put_framework(out *o, const stats_view *v)
{
    if (!v->proc.framework_read_at)
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double s = ((double)now.tv_sec * 1e9 + (double)now.tv_nsec -
                (double)v->proc.framework_read_at) / 1e9;
    char age[16];
    if (s < 60)
        snprintf(age, sizeof(age), "%.0fs", s < 0 ? 0 : s);
    else
        snprintf(age, sizeof(age), s < 3600 ? "%.0fm" : s < 86400 * 9 ? "%.0fh" : "long",
                 s < 3600 ? s / 60 : s / 3600);
    for (uint32_t k = 0; k < v->ndevices; k++) {
        const stats_device *d = &v->dev[k];
        if (d->framework_reserved == STATS_UNKNOWN || !d->framework_reserved)
            continue;
        char a[24], r[24], c[24], in[24];
        uint64_t cache = d->framework_reserved > d->framework_allocated
                             ? d->framework_reserved - d->framework_allocated : 0;
        put(o, "  PyTorch dev %d: alloc %s reserved %s cache %s inactive %s, %s ago\n",
            d->device,
            fmt_short(d->framework_allocated, a, sizeof(a)),
            fmt_short(d->framework_reserved, r, sizeof(r)), fmt_short(cache, c, sizeof(c)),
            fmt_short(d->framework_inactive, in, sizeof(in)), age);
    }
}

/* Under a process paused by cupool pause: since when, and what it needs. */
static void put_paused(out *o, const stats_view *v)
{
    if (!v->proc.paused_since)
        return;
    time_t t = (time_t)(v->proc.paused_since / 1000000000u);
    char when[32], b[24];
    strftime(when, sizeof(when), "%H:%M:%S", localtime(&t));
    put(o, "  paused (cupool pause) since %s: needs %s of device memory back to resume\n",
        when, fmt_short(v->proc.paused_needs, b, sizeof(b)));
}

size_t stats_format_table(const stats_view *const *v, size_t n, char *buf,
                          size_t len)
{
    return stats_format_table_with(v, NULL, NULL, n, buf, len);
}

size_t stats_format_table_with(const stats_view *const *v, const char *head,
                               const char *const *extra, size_t n, char *buf, size_t len)
{
    out o = {buf, len, 0};
    put(&o, "%-7s %-10s %3s %6s %6s %6s %4s %7s %6s %8s %5s%s%s\n", "PID", "COMM", "DEV",
        "ALLOC", "RESERV", "CACHED", "FRAG", "OUTSIDE", "PEAK", "ALLOCS", "HIT%",
        head ? " " : "", head ? head : "");
    for (size_t i = 0; i < n; i++) {
        for (uint32_t k = 0; k < v[i]->ndevices; k++) {
            const stats_device *d = &v[i]->dev[k];
            char a[24], r[24], c[24], o2[24], p[24];
            double hit = d->allocs ? 100.0 * (double)d->hits / (double)d->allocs : 0;
            char name[sizeof(v[i]->comm)];
            char more[96] = "";
            if (head && extra && extra[i])
                snprintf(more, sizeof(more), " %s", extra[i]);
            put(&o, "%-7d %-10.10s %3d %6s %6s %6s %3.0f%% %7s %6s %8lu %4.0f%%%s\n",
                v[i]->pid, stats_printable(v[i]->comm, name, sizeof(name)), d->device,
                fmt_short(d->allocated, a, sizeof(a)), fmt_short(d->reserved, r, sizeof(r)),
                fmt_short(d->cached, c, sizeof(c)), 100.0 * stats_fragmentation(d),
                fmt_short(d->outside_pool, o2, sizeof(o2)),
                fmt_short(d->reserved_peak, p, sizeof(p)), (unsigned long)d->allocs, hit,
                more);
        }
        put_framework(&o, v[i]);
        put_paused(&o, v[i]);
    }
    return done(&o);
}

/* One "device N  name  value  (bytes)" line of the detail dump; an
 * unknown value (NVML could not tell) reads "unknown". */
static void put_detail(out *o, const char *who, const char *name, uint64_t v, bool bytes)
{
    char h[24];
    if (v == STATS_UNKNOWN)
        put(o, "%-10s%-20s %20s\n", who, name, "unknown");
    else
        put(o, "%-10s%-20s %20lu%s%s%s\n", who, name, (unsigned long)v,
            bytes ? "  (" : "", bytes ? stats_fmt_bytes(v, h, sizeof(h)) : "",
            bytes ? ")" : "");
}

size_t stats_format_detail(const stats_view *v, char *buf, size_t len)
{
    out o = {buf, len, 0};
    char name[sizeof(v->comm)], who[16];
    put(&o, "cupool statistics, pid %d (%s)\n", v->pid,
        stats_printable(v->comm, name, sizeof(name)));
    enum { unit_BYTES = 1, unit_COUNT = 0 };
    for (uint32_t k = 0; k < v->ndevices; k++) {
        const stats_device *d = &v->dev[k];
        snprintf(who, sizeof(who), "device %d", d->device);
#define X(name, unit, kind, help) put_detail(&o, who, #name, d->name, unit_##unit);
        STATS_DEVICE_FIELDS(X)
#undef X
        put(&o, "%-10s%-20s %20.3f\n", who, "fragmentation", stats_fragmentation(d));
    }
#define X(name, unit, kind, help) put_detail(&o, "process", #name, v->proc.name, unit_##unit);
    STATS_PROCESS_FIELDS(X)
#undef X
    return done(&o);
}

/* ---- JSON ------------------------------------------------------------------ */

static void put_json_string(out *o, const char *s)
{
    put(o, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            put(o, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f) /* bytes, not UTF-8: one code each */
            put(o, "\\u%04x", c);
        else
            put(o, "%c", c);
    }
    put(o, "\"");
}

size_t stats_json_string(const char *s, char *buf, size_t len)
{
    out o = {buf, len, 0};
    put_json_string(&o, s);
    return done(&o);
}

static void put_json_value(out *o, const char *name, uint64_t v)
{
    if (v == STATS_UNKNOWN)
        put(o, ",\"%s\":null", name);
    else
        put(o, ",\"%s\":%lu", name, (unsigned long)v);
}

size_t stats_format_json(const stats_view *v, char *buf, size_t len)
{
    out o = {buf, len, 0};
    put(&o, "{\"cupool\":1,\"version\":\"%s\",\"pid\":%d,\"comm\":", CUPOOL_VERSION, v->pid);
    put_json_string(&o, v->comm);
    put(&o, ",\"updated_ns\":%lu,\"flush_signal\":%d,\"devices\":[",
        (unsigned long)v->updated_ns, v->flush_signal);
    for (uint32_t k = 0; k < v->ndevices; k++) {
        const stats_device *d = &v->dev[k];
        put(&o, "%s{\"device\":%d", k ? "," : "", d->device);
#define X(name, unit, kind, help) put_json_value(&o, #name, d->name);
        STATS_DEVICE_FIELDS(X)
#undef X
        put(&o, ",\"fragmentation\":%.4f}", stats_fragmentation(d));
    }
    put(&o, "],\"process\":{\"pid\":%d", v->pid);
#define X(name, unit, kind, help) put_json_value(&o, #name, v->proc.name);
    STATS_PROCESS_FIELDS(X)
#undef X
    put(&o, "}}\n");
    return done(&o);
}

/* ---- Prometheus -------------------------------------------------------------- */

/* The length of the UTF-8 sequence at s (1 to 4) if it is valid and not
 * a control character (C1: U+0080 to U+009F), else 0: shortest form, no
 * surrogates, at most U+10FFFF. */
static size_t utf8_char(const unsigned char *s)
{
    unsigned c = s[0];
    size_t n = c >= 0xf5 ? 0 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 ? 2 : 0;
    if (!n)
        return 0;
    unsigned cp = c & (0x7f >> n);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    bool shortest = n != 3 ? (n != 4 || cp >= 0x10000) : cp >= 0x800;
    if (!shortest || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0)
        return 0;
    return n;
}

/* A label value as the exposition format wants it: \\, \" and \n
 * escaped, UTF-8 text as it is; a control character (other than the
 * newline) or a byte that is not UTF-8 becomes U+FFFD, for the format has
 * no escape for them and a reader's terminal would act on them. At most
 * 128 bytes of s are read. */
static void put_label(out *o, const char *s)
{
    const unsigned char *u = (const unsigned char *)s, *end = u + strnlen(s, 128);
    while (u < end) {
        size_t n = *u >= 0x80 ? utf8_char(u) : 1;
        if (n > (size_t)(end - u))
            n = 0;
        if (*u == '\\' || *u == '"')
            put(o, "\\%c", *u);
        else if (*u == '\n')
            put_str(o, "\\n");
        else if (!n || *u < 0x20 || *u == 0x7f)
            put_str(o, "\xef\xbf\xbd");
        else
            put(o, "%.*s", (int)n, (const char *)u);
        u += n ? n : 1;
    }
}

/* Prometheus name of a field: cupool_NAME[_bytes][_total]. */
/* cupool_NAME[_bytes][_total], the unit added unless the name ends in it
 * already (stitched_bytes: cupool_stitched_bytes_total). */
static void metric_name(char *m, size_t len, const char *name, int bytes,
                        int counter)
{
    size_t n = strlen(name);
    bool has_unit = n >= 6 && !strcmp(name + n - 6, "_bytes");
    snprintf(m, len, "cupool_%s%s%s", name, bytes && !has_unit ? "_bytes" : "",
             counter ? "_total" : "");
}

static void put_family(out *o, const char *m, int counter, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", m, help, m, counter ? "counter" : "gauge");
}

/* {pid="..",comm=".."[,device=".."][,EXTRA]}: extra, when not NULL,
 * is more labels, escaped already. */
static void put_labels(out *o, const stats_view *v, int device, const char *extra)
{
    put(o, "{pid=\"%d\",comm=\"", v->pid);
    put_label(o, v->comm);
    if (device >= 0)
        put(o, "\",device=\"%d", device);
    put_str(o, "\"");
    if (extra) {
        put_str(o, ",");
        put_str(o, extra);
    }
    put_str(o, "}");
}

void stats_prometheus_label(const char *name, const char *value, char *buf, size_t len)
{
    out o = {buf, len, 0};
    put(&o, "%s=\"", name);
    put_label(&o, value);
    put(&o, "\"");
    done(&o);
}

size_t stats_format_prometheus(const stats_view *const *v, size_t n,
                               char *buf, size_t len)
{
    return stats_format_prometheus_with(v, NULL, n, buf, len);
}

size_t stats_format_prometheus_with(const stats_view *const *v, const char *const *extra,
                                    size_t n, char *buf, size_t len)
{
    out o = {buf, len, 0};
    char m[96];
    put_family(&o, "cupool_build_info", 0, "cupool's version (the value is always 1)");
    put(&o, "cupool_build_info{version=\"%s\"} 1\n", CUPOOL_VERSION);
    enum { is_BYTES = 1, is_COUNT = 0, is_GAUGE = 0, is_COUNTER = 1 };
#define X(name, unit, kind, help)                                             \
    metric_name(m, sizeof(m), #name, is_##unit, is_##kind);                   \
    put_family(&o, m, is_##kind, help);                                       \
    for (size_t i = 0; i < n; i++)                                            \
        for (uint32_t k = 0; k < v[i]->ndevices; k++) {                       \
            if (v[i]->dev[k].name == STATS_UNKNOWN)                           \
                continue;                                                     \
            put_str(&o, m);                                                   \
            put_labels(&o, v[i], v[i]->dev[k].device, extra ? extra[i] : NULL);                        \
            put(&o, " %lu\n", (unsigned long)v[i]->dev[k].name);              \
        }
    STATS_DEVICE_FIELDS(X)
#undef X
    put_family(&o, "cupool_fragmentation_ratio", 0,
               "1 - largest free block / cached bytes");
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < v[i]->ndevices; k++) {
            put(&o, "cupool_fragmentation_ratio");
            put_labels(&o, v[i], v[i]->dev[k].device, extra ? extra[i] : NULL);
            put(&o, " %.4f\n", stats_fragmentation(&v[i]->dev[k]));
        }
#define X(name, unit, kind, help)                                             \
    metric_name(m, sizeof(m), #name, is_##unit, is_##kind);                   \
    put_family(&o, m, is_##kind, help);                                       \
    for (size_t i = 0; i < n; i++) {                                          \
        put_str(&o, m);                                                       \
        put_labels(&o, v[i], -1, extra ? extra[i] : NULL);                                             \
        put(&o, " %lu\n", (unsigned long)v[i]->proc.name);                    \
    }
    STATS_PROCESS_FIELDS(X)
#undef X
    return done(&o);
}

/* ---- a group (cupool stat --group) ------------------------------------------ */

const char *group_cap_text(group_cap c, char *buf, size_t len)
{
    if (c.percent)
        snprintf(buf, len, "%u%%", c.percent);
    else if (c.bytes)
        stats_fmt_bytes(c.bytes, buf, len);
    else
        snprintf(buf, len, "none");
    return buf;
}

void group_caps_text(const group_cap *caps, char *buf, size_t len)
{
    char c[32];
    size_t n = (size_t)snprintf(buf, len, "%s per device", group_cap_text(caps[0], c, sizeof(c)));
    for (int i = 1; i < STATS_MAX_DEVICES && n < len; i++)
        if (memcmp(&caps[i], &caps[0], sizeof(caps[0])))
            n += (size_t)snprintf(buf + n, len - n, ", %s on device %d",
                                  group_cap_text(caps[i], c, sizeof(c)), i);
}

/* The devices any member holds or caches memory on, as a bit set. */
static uint64_t group_devices(const group_view *g)
{
    uint64_t used = 0;
    for (uint32_t i = 0; i < g->nmembers; i++)
        for (int k = 0; k < STATS_MAX_DEVICES; k++)
            if (g->members[i].held[k] || g->members[i].cached[k])
                used |= 1ull << k;
    return used;
}

/* A waiting member's place in the queue of its device (1 = next), or 0
 * when it does not wait. */
static int group_turn(const group_view *g, const group_member_view *m)
{
    if (!m->wait_seq)
        return 0;
    int turn = 1;
    for (uint32_t i = 0; i < g->nmembers; i++)
        turn += g->members[i].wait_seq && g->members[i].wait_seq < m->wait_seq &&
                g->members[i].wait_dev == m->wait_dev;
    return turn;
}

/* Seconds since a CLOCK_REALTIME stamp. */
static double group_waited_s(uint64_t since_ns)
{
    uint64_t now = stats_unix_ns();
    return now > since_ns ? (double)(now - since_ns) / 1e9 : 0.0;
}

uint64_t stats_unix_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The members waiting for a turn, in the order they will get it. */
static void group_waiters_table(out *o, const group_view *g)
{
    char a[24], comm[16];
    for (int turn = 1; turn <= GROUP_MEMBERS; turn++)
        for (uint32_t i = 0; i < g->nmembers; i++) {
            const group_member_view *m = &g->members[i];
            if (group_turn(g, m) == turn)
                put(o, "waiting %d: pid %d (%s) for %s on device %d, for %.1f s\n", turn,
                    m->pid, stats_printable(m->comm, comm, sizeof(comm)),
                    fmt_short(m->wait_bytes, a, sizeof(a)), m->wait_dev,
                    group_waited_s(m->wait_since_ns));
        }
}

static void group_table(out *o, const group_view *g)
{
    char a[24], b[24], name[GROUP_NAME_MAX + 1], caps[256];
    group_caps_text(g->caps, caps, sizeof(caps));
    put(o, "group %s: budget %s, %u member%s\n", stats_printable(g->name, name, sizeof(name)),
        caps, g->nmembers, g->nmembers == 1 ? "" : "s");
    put(o, "%-7s %-10s %3s %6s %6s\n", "PID", "COMM", "DEV", "HELD", "CACHED");
    /* A member marked "ending": its program is done, its process gives its
     * memory back as it goes. */
    uint64_t devs = group_devices(g);
    for (int k = 0; k < STATS_MAX_DEVICES; k++) {
        if (!(devs >> k & 1))
            continue;
        uint64_t held = 0;
        for (uint32_t i = 0; i < g->nmembers; i++) {
            const group_member_view *m = &g->members[i];
            char comm[16];
            held += m->held[k];
            put(o, "%-7d %-10.10s %3d %6s %6s%s\n", m->pid,
                stats_printable(m->comm, comm, sizeof(comm)), k,
                fmt_short(m->held[k], a, sizeof(a)), fmt_short(m->cached[k], b, sizeof(b)),
                m->ending ? "  ending" : "");
        }
        group_cap c = g->caps[k];
        put(o, "%-18s %3d %6s of %s\n", "group", k, fmt_short(held, a, sizeof(a)),
            c.percent ? group_cap_text(c, b, sizeof(b))
                      : c.bytes ? fmt_short(c.bytes, b, sizeof(b)) : "none");
    }
    group_waiters_table(o, g);
}

static void group_json(out *o, const group_view *g)
{
    put(o, "{\"group\": ");
    put_json_string(o, g->name);
    uint64_t devs = group_devices(g);
    put(o, ", \"budgets\": [");
    for (int k = 0; k < STATS_MAX_DEVICES; k++)
        if ((devs | 1) >> k & 1)
            put(o, "%s{\"device\": %d, \"bytes\": %lu, \"percent\": %u}", k ? ", " : "", k,
                (unsigned long)g->caps[k].bytes, g->caps[k].percent);
    put(o, "], \"members\": [");
    for (uint32_t i = 0; i < g->nmembers; i++) {
        const group_member_view *m = &g->members[i];
        put(o, "%s{\"pid\": %d, \"comm\": ", i ? ", " : "", m->pid);
        put_json_string(o, m->comm);
        put(o, ", \"ending\": %s, \"waiting\": ", m->ending ? "true" : "false");
        if (m->wait_seq)
            put(o, "{\"turn\": %d, \"device\": %d, \"bytes\": %lu, \"since_ns\": %lu, "
                "\"seconds\": %.3f}", group_turn(g, m), m->wait_dev,
                (unsigned long)m->wait_bytes, (unsigned long)m->wait_since_ns,
                group_waited_s(m->wait_since_ns));
        else
            put(o, "null");
        put(o, ", \"devices\": [");
        bool first = true;
        for (int k = 0; k < STATS_MAX_DEVICES; k++)
            if (devs >> k & 1) {
                put(o, "%s{\"device\": %d, \"held\": %lu, \"cached\": %lu}", first ? "" : ", ",
                    k, (unsigned long)m->held[k], (unsigned long)m->cached[k]);
                first = false;
            }
        put(o, "]}");
    }
    put(o, "]}\n");
}

static void group_prometheus(out *o, const group_view *g)
{
    uint64_t devs = group_devices(g);
    static const char *const lim[] = {"cupool_group_limit_bytes", "cupool_group_limit_percent"};
    static const char *const lim_help[] = {
        "budget of the group on the device in bytes (0 = none, or a percentage)",
        "budget of the group on the device as a percentage of its memory (0 = none, or bytes)"};
    for (int f = 0; f < 2; f++) {
        put_family(o, lim[f], 0, lim_help[f]);
        for (int k = 0; k < STATS_MAX_DEVICES; k++)
            if ((devs | 1) >> k & 1) {
                put(o, "%s{group=\"", lim[f]);
                put_label(o, g->name);
                put(o, "\",device=\"%d\"} %lu\n", k,
                    f ? (unsigned long)g->caps[k].percent : (unsigned long)g->caps[k].bytes);
            }
    }
    static const char *const fam[] = {"cupool_group_held_bytes", "cupool_group_cached_bytes"};
    static const char *const help[] = {"bytes a member of the group holds on the device",
                                       "bytes a member of the group caches on the device"};
    for (int f = 0; f < 2; f++) {
        put_family(o, fam[f], 0, help[f]);
        for (uint32_t i = 0; i < g->nmembers; i++)
            for (int k = 0; k < STATS_MAX_DEVICES; k++) {
                if (!(devs >> k & 1))
                    continue;
                const group_member_view *m = &g->members[i];
                put(o, "%s{group=\"", fam[f]);
                put_label(o, g->name);
                put(o, "\",pid=\"%d\",comm=\"", m->pid);
                put_label(o, m->comm);
                put(o, "\",device=\"%d\"} %lu\n", k,
                    (unsigned long)(f ? m->cached[k] : m->held[k]));
            }
    }
    static const char *const wfam[] = {"cupool_group_waiting_bytes",
                                       "cupool_group_waiting_seconds"};
    static const char *const whelp[] = {
        "bytes a member of the group waits for its turn to take on the device",
        "seconds a member of the group has waited for its turn on the device"};
    for (int f = 0; f < 2; f++) {
        put_family(o, wfam[f], 0, whelp[f]);
        for (uint32_t i = 0; i < g->nmembers; i++) {
            const group_member_view *m = &g->members[i];
            if (!m->wait_seq)
                continue;
            put(o, "%s{group=\"", wfam[f]);
            put_label(o, g->name);
            put(o, "\",pid=\"%d\",comm=\"", m->pid);
            put_label(o, m->comm);
            if (f)
                put(o, "\",device=\"%d\"} %.3f\n", m->wait_dev,
                    group_waited_s(m->wait_since_ns));
            else
                put(o, "\",device=\"%d\"} %lu\n", m->wait_dev, (unsigned long)m->wait_bytes);
        }
    }
}

size_t stats_format_group(const group_view *g, enum stats_format f, char *buf, size_t len)
{
    out o = {buf, len, 0};
    if (f == STATS_JSON)
        group_json(&o, g);
    else if (f == STATS_PROMETHEUS)
        group_prometheus(&o, g);
    else
        group_table(&o, g);
    return done(&o);
}
