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

#include "stats.h"
#include "text.h"

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

/* ---- table --------------------------------------------------------------- */

/* n in at most 6 characters for the table: three significant digits and a
 * binary unit ("146M", "55.9M", "4.00G", "512K", "0"); "-" when unknown. */
const char *stats_fmt_short(uint64_t n, char *buf, size_t len)
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
static void put_framework(text_buf *o, const stats_view *v)
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
        text_put(o, "  PyTorch dev %d: alloc %s reserved %s cache %s inactive %s, %s ago\n",
            d->device,
            stats_fmt_short(d->framework_allocated, a, sizeof(a)),
            stats_fmt_short(d->framework_reserved, r, sizeof(r)), stats_fmt_short(cache, c, sizeof(c)),
            stats_fmt_short(d->framework_inactive, in, sizeof(in)), age);
    }
}

/* Under a process paused by cupool pause: since when, and what it needs. */
static void put_paused(text_buf *o, const stats_view *v)
{
    if (!v->proc.paused_since)
        return;
    time_t t = (time_t)(v->proc.paused_since / 1000000000u);
    char when[32], b[24];
    strftime(when, sizeof(when), "%H:%M:%S", localtime(&t));
    text_put(o, "  paused (cupool pause) since %s: needs %s of device memory back to resume\n",
        when, stats_fmt_short(v->proc.paused_needs, b, sizeof(b)));
}

size_t stats_format_table(const stats_view *const *v, size_t n, char *buf,
                          size_t len)
{
    return stats_format_table_with(v, NULL, NULL, n, buf, len);
}

size_t stats_format_table_with(const stats_view *const *v, const char *head,
                               const char *const *extra, size_t n, char *buf, size_t len)
{
    text_buf o = {buf, len, 0};
    text_put(&o, "%-7s %-10s %3s %6s %6s %6s %4s %7s %6s %8s %5s%s%s\n", "PID", "COMM", "DEV",
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
            text_put(&o, "%-7d %-10.10s %3d %6s %6s %6s %3.0f%% %7s %6s %8lu %4.0f%%%s\n",
                v[i]->pid, text_printable(v[i]->comm, name, sizeof(name)), d->device,
                stats_fmt_short(d->allocated, a, sizeof(a)), stats_fmt_short(d->reserved, r, sizeof(r)),
                stats_fmt_short(d->cached, c, sizeof(c)), 100.0 * stats_fragmentation(d),
                stats_fmt_short(d->outside_pool, o2, sizeof(o2)),
                stats_fmt_short(d->reserved_peak, p, sizeof(p)), (unsigned long)d->allocs, hit,
                more);
        }
        put_framework(&o, v[i]);
        put_paused(&o, v[i]);
    }
    return text_done(&o);
}

/* One "device N  name  value  (bytes)" line of the detail dump; an
 * unknown value (NVML could not tell) reads "unknown". */
static void put_detail(text_buf *o, const char *who, const char *name, uint64_t v, bool bytes)
{
    char h[24];
    if (v == STATS_UNKNOWN)
        text_put(o, "%-10s%-20s %20s\n", who, name, "unknown");
    else
        text_put(o, "%-10s%-20s %20lu%s%s%s\n", who, name, (unsigned long)v,
            bytes ? "  (" : "", bytes ? stats_fmt_bytes(v, h, sizeof(h)) : "",
            bytes ? ")" : "");
}

size_t stats_format_detail(const stats_view *v, char *buf, size_t len)
{
    text_buf o = {buf, len, 0};
    char name[sizeof(v->comm)], who[16];
    text_put(&o, "cupool statistics, pid %d (%s)\n", v->pid,
        text_printable(v->comm, name, sizeof(name)));
    enum { unit_BYTES = 1, unit_COUNT = 0 };
    for (uint32_t k = 0; k < v->ndevices; k++) {
        const stats_device *d = &v->dev[k];
        snprintf(who, sizeof(who), "device %d", d->device);
#define X(name, unit, kind, help) put_detail(&o, who, #name, d->name, unit_##unit);
        STATS_DEVICE_FIELDS(X)
#undef X
        text_put(&o, "%-10s%-20s %20.3f\n", who, "fragmentation", stats_fragmentation(d));
    }
#define X(name, unit, kind, help) put_detail(&o, "process", #name, v->proc.name, unit_##unit);
    STATS_PROCESS_FIELDS(X)
#undef X
    return text_done(&o);
}

/* ---- JSON ------------------------------------------------------------------ */

void stats_put_json_string(text_buf *o, const char *s)
{
    text_put(o, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            text_put(o, "\\%c", c);
        else if (c < 0x20 || c >= 0x7f) /* bytes, not UTF-8: one code each */
            text_put(o, "\\u%04x", c);
        else
            text_put(o, "%c", c);
    }
    text_put(o, "\"");
}

size_t stats_json_string(const char *s, char *buf, size_t len)
{
    text_buf o = {buf, len, 0};
    stats_put_json_string(&o, s);
    return text_done(&o);
}

static void put_json_value(text_buf *o, const char *name, uint64_t v)
{
    if (v == STATS_UNKNOWN)
        text_put(o, ",\"%s\":null", name);
    else
        text_put(o, ",\"%s\":%lu", name, (unsigned long)v);
}

size_t stats_format_json(const stats_view *v, char *buf, size_t len)
{
    text_buf o = {buf, len, 0};
    text_put(&o, "{\"cupool\":1,\"version\":\"%s\",\"pid\":%d,\"comm\":", CUPOOL_VERSION, v->pid);
    stats_put_json_string(&o, v->comm);
    text_put(&o, ",\"updated_ns\":%lu,\"flush_signal\":%d,\"devices\":[",
        (unsigned long)v->updated_ns, v->flush_signal);
    for (uint32_t k = 0; k < v->ndevices; k++) {
        const stats_device *d = &v->dev[k];
        text_put(&o, "%s{\"device\":%d", k ? "," : "", d->device);
#define X(name, unit, kind, help) put_json_value(&o, #name, d->name);
        STATS_DEVICE_FIELDS(X)
#undef X
        text_put(&o, ",\"fragmentation\":%.4f}", stats_fragmentation(d));
    }
    text_put(&o, "],\"process\":{\"pid\":%d", v->pid);
#define X(name, unit, kind, help) put_json_value(&o, #name, v->proc.name);
    STATS_PROCESS_FIELDS(X)
#undef X
    text_put(&o, "}}\n");
    return text_done(&o);
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
void stats_put_label(text_buf *o, const char *s)
{
    const unsigned char *u = (const unsigned char *)s, *end = u + strnlen(s, 128);
    while (u < end) {
        size_t n = *u >= 0x80 ? utf8_char(u) : 1;
        if (n > (size_t)(end - u))
            n = 0;
        if (*u == '\\' || *u == '"')
            text_put(o, "\\%c", *u);
        else if (*u == '\n')
            text_str(o, "\\n");
        else if (!n || *u < 0x20 || *u == 0x7f)
            text_str(o, "\xef\xbf\xbd");
        else
            text_put(o, "%.*s", (int)n, (const char *)u);
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

void stats_put_family(text_buf *o, const char *m, int counter, const char *help)
{
    text_put(o, "# HELP %s %s\n# TYPE %s %s\n", m, help, m, counter ? "counter" : "gauge");
}

/* {pid="..",comm=".."[,device=".."][,EXTRA]}: extra, when not NULL,
 * is more labels, escaped already. */
static void put_labels(text_buf *o, const stats_view *v, int device, const char *extra)
{
    text_put(o, "{pid=\"%d\",comm=\"", v->pid);
    stats_put_label(o, v->comm);
    if (device >= 0)
        text_put(o, "\",device=\"%d", device);
    text_str(o, "\"");
    if (extra) {
        text_str(o, ",");
        text_str(o, extra);
    }
    text_str(o, "}");
}

void stats_prometheus_label(const char *name, const char *value, char *buf, size_t len)
{
    text_buf o = {buf, len, 0};
    text_put(&o, "%s=\"", name);
    stats_put_label(&o, value);
    text_put(&o, "\"");
    text_done(&o);
}

size_t stats_format_prometheus(const stats_view *const *v, size_t n,
                               char *buf, size_t len)
{
    return stats_format_prometheus_with(v, NULL, n, buf, len);
}

size_t stats_format_prometheus_with(const stats_view *const *v, const char *const *extra,
                                    size_t n, char *buf, size_t len)
{
    text_buf o = {buf, len, 0};
    char m[96];
    stats_put_family(&o, "cupool_build_info", 0, "cupool's version (the value is always 1)");
    text_put(&o, "cupool_build_info{version=\"%s\"} 1\n", CUPOOL_VERSION);
    enum { is_BYTES = 1, is_COUNT = 0, is_GAUGE = 0, is_COUNTER = 1 };
#define X(name, unit, kind, help)                                             \
    metric_name(m, sizeof(m), #name, is_##unit, is_##kind);                   \
    stats_put_family(&o, m, is_##kind, help);                                       \
    for (size_t i = 0; i < n; i++)                                            \
        for (uint32_t k = 0; k < v[i]->ndevices; k++) {                       \
            if (v[i]->dev[k].name == STATS_UNKNOWN)                           \
                continue;                                                     \
            text_str(&o, m);                                                   \
            put_labels(&o, v[i], v[i]->dev[k].device, extra ? extra[i] : NULL);                        \
            text_put(&o, " %lu\n", (unsigned long)v[i]->dev[k].name);              \
        }
    STATS_DEVICE_FIELDS(X)
#undef X
    stats_put_family(&o, "cupool_fragmentation_ratio", 0,
               "1 - largest free block / cached bytes");
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < v[i]->ndevices; k++) {
            text_put(&o, "cupool_fragmentation_ratio");
            put_labels(&o, v[i], v[i]->dev[k].device, extra ? extra[i] : NULL);
            text_put(&o, " %.4f\n", stats_fragmentation(&v[i]->dev[k]));
        }
#define X(name, unit, kind, help)                                             \
    metric_name(m, sizeof(m), #name, is_##unit, is_##kind);                   \
    stats_put_family(&o, m, is_##kind, help);                                       \
    for (size_t i = 0; i < n; i++) {                                          \
        text_str(&o, m);                                                       \
        put_labels(&o, v[i], -1, extra ? extra[i] : NULL);                                             \
        text_put(&o, " %lu\n", (unsigned long)v[i]->proc.name);                    \
    }
    STATS_PROCESS_FIELDS(X)
#undef X
    return text_done(&o);
}

