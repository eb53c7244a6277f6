/* SPDX-License-Identifier: Apache-2.0 */
/*
 * format.c - a group's view as cupool stat --group shows it: the table,
 * JSON and Prometheus, made of the statistics' own pieces (stats.h) so
 * they read as the processes' do; and a budget as words.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "groupseg.h"
#include "stats.h"
#include "text.h"

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
    uint64_t now = clock_unix_ns();
    return now > since_ns ? (double)(now - since_ns) / 1e9 : 0.0;
}

/* The members waiting for a turn, in the order they will get it. */
static void group_waiters_table(text_buf *o, const group_view *g)
{
    char a[24], comm[16];
    for (int turn = 1; turn <= GROUP_MEMBERS; turn++)
        for (uint32_t i = 0; i < g->nmembers; i++) {
            const group_member_view *m = &g->members[i];
            if (group_turn(g, m) == turn)
                text_put(o, "waiting %d: pid %d (%s) for %s on device %d, for %.1f s%s\n",
                    turn, m->pid, text_printable(m->comm, comm, sizeof(comm)),
                    stats_fmt_short(m->wait_bytes, a, sizeof(a)), m->wait_dev,
                    group_waited_s(m->wait_since_ns), m->wait_taking ? ", taking it now" : "");
        }
}

static void group_table(text_buf *o, const group_view *g)
{
    char a[24], b[24], name[GROUP_NAME_MAX + 1], caps[256];
    group_caps_text(g->caps, caps, sizeof(caps));
    text_put(o, "group %s: budget %s, %u member%s\n", text_printable(g->name, name, sizeof(name)),
        caps, g->nmembers, g->nmembers == 1 ? "" : "s");
    text_put(o, "%-7s %-10s %3s %6s %6s\n", "PID", "COMM", "DEV", "HELD", "CACHED");
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
            text_put(o, "%-7d %-10.10s %3d %6s %6s%s\n", m->pid,
                text_printable(m->comm, comm, sizeof(comm)), k,
                stats_fmt_short(m->held[k], a, sizeof(a)), stats_fmt_short(m->cached[k], b, sizeof(b)),
                m->ending ? "  ending" : "");
        }
        group_cap c = g->caps[k];
        text_put(o, "%-18s %3d %6s of %s\n", "group", k, stats_fmt_short(held, a, sizeof(a)),
            c.percent ? group_cap_text(c, b, sizeof(b))
                      : c.bytes ? stats_fmt_short(c.bytes, b, sizeof(b)) : "none");
    }
    group_waiters_table(o, g);
}

static void group_json(text_buf *o, const group_view *g)
{
    text_put(o, "{\"group\": ");
    stats_put_json_string(o, g->name);
    uint64_t devs = group_devices(g);
    text_put(o, ", \"budgets\": [");
    for (int k = 0; k < STATS_MAX_DEVICES; k++)
        if ((devs | 1) >> k & 1)
            text_put(o, "%s{\"device\": %d, \"bytes\": %lu, \"percent\": %u}", k ? ", " : "", k,
                (unsigned long)g->caps[k].bytes, g->caps[k].percent);
    text_put(o, "], \"members\": [");
    for (uint32_t i = 0; i < g->nmembers; i++) {
        const group_member_view *m = &g->members[i];
        text_put(o, "%s{\"pid\": %d, \"comm\": ", i ? ", " : "", m->pid);
        stats_put_json_string(o, m->comm);
        text_put(o, ", \"ending\": %s, \"waiting\": ", m->ending ? "true" : "false");
        if (m->wait_seq)
            text_put(o, "{\"turn\": %d, \"device\": %d, \"bytes\": %lu, \"since_ns\": %lu, "
                "\"seconds\": %.3f, \"taking\": %s}", group_turn(g, m), m->wait_dev,
                (unsigned long)m->wait_bytes, (unsigned long)m->wait_since_ns,
                group_waited_s(m->wait_since_ns), m->wait_taking ? "true" : "false");
        else
            text_put(o, "null");
        text_put(o, ", \"devices\": [");
        bool first = true;
        for (int k = 0; k < STATS_MAX_DEVICES; k++)
            if (devs >> k & 1) {
                text_put(o, "%s{\"device\": %d, \"held\": %lu, \"cached\": %lu}", first ? "" : ", ",
                    k, (unsigned long)m->held[k], (unsigned long)m->cached[k]);
                first = false;
            }
        text_put(o, "]}");
    }
    text_put(o, "]}\n");
}

static void group_prometheus(text_buf *o, const group_view *g)
{
    uint64_t devs = group_devices(g);
    static const char *const lim[] = {"cupool_group_limit_bytes", "cupool_group_limit_percent"};
    static const char *const lim_help[] = {
        "budget of the group on the device in bytes (0 = none, or a percentage)",
        "budget of the group on the device as a percentage of its memory (0 = none, or bytes)"};
    for (int f = 0; f < 2; f++) {
        stats_put_family(o, lim[f], 0, lim_help[f]);
        for (int k = 0; k < STATS_MAX_DEVICES; k++)
            if ((devs | 1) >> k & 1) {
                text_put(o, "%s{group=\"", lim[f]);
                stats_put_label(o, g->name);
                text_put(o, "\",device=\"%d\"} %lu\n", k,
                    f ? (unsigned long)g->caps[k].percent : (unsigned long)g->caps[k].bytes);
            }
    }
    static const char *const fam[] = {"cupool_group_held_bytes", "cupool_group_cached_bytes"};
    static const char *const help[] = {"bytes a member of the group holds on the device",
                                       "bytes a member of the group caches on the device"};
    for (int f = 0; f < 2; f++) {
        stats_put_family(o, fam[f], 0, help[f]);
        for (uint32_t i = 0; i < g->nmembers; i++)
            for (int k = 0; k < STATS_MAX_DEVICES; k++) {
                if (!(devs >> k & 1))
                    continue;
                const group_member_view *m = &g->members[i];
                text_put(o, "%s{group=\"", fam[f]);
                stats_put_label(o, g->name);
                text_put(o, "\",pid=\"%d\",comm=\"", m->pid);
                stats_put_label(o, m->comm);
                text_put(o, "\",device=\"%d\"} %lu\n", k,
                    (unsigned long)(f ? m->cached[k] : m->held[k]));
            }
    }
    static const char *const wfam[] = {"cupool_group_waiting_bytes",
                                       "cupool_group_waiting_seconds"};
    static const char *const whelp[] = {
        "bytes a member of the group waits for its turn to take on the device",
        "seconds a member of the group has waited for its turn on the device"};
    for (int f = 0; f < 2; f++) {
        stats_put_family(o, wfam[f], 0, whelp[f]);
        for (uint32_t i = 0; i < g->nmembers; i++) {
            const group_member_view *m = &g->members[i];
            if (!m->wait_seq)
                continue;
            text_put(o, "%s{group=\"", wfam[f]);
            stats_put_label(o, g->name);
            text_put(o, "\",pid=\"%d\",comm=\"", m->pid);
            stats_put_label(o, m->comm);
            if (f)
                text_put(o, "\",device=\"%d\"} %.3f\n", m->wait_dev,
                    group_waited_s(m->wait_since_ns));
            else
                text_put(o, "\",device=\"%d\"} %lu\n", m->wait_dev, (unsigned long)m->wait_bytes);
        }
    }
}

size_t stats_format_group(const group_view *g, enum stats_format f, char *buf, size_t len)
{
    text_buf o = {buf, len, 0};
    if (f == STATS_JSON)
        group_json(&o, g);
    else if (f == STATS_PROMETHEUS)
        group_prometheus(&o, g);
    else
        group_table(&o, g);
    return text_done(&o);
}
