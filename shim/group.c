/*
 * group.c - see group.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "group.h"
#include "log.h"
#include "process.h"
#include "stats.h"
#include "groupseg.h"

static group *grp;  /* set once at start-up, before any budget is used */
static int dev_ids[SHIM_MAX_DEVICES];
static pool_budget_outer outers[SHIM_MAX_DEVICES];

static int outer_take(void *ctx, uint64_t size, bool force)
{
    int dev = *(const int *)ctx;
    if (force) {
        group_charge(grp, dev, size);
        return 0;
    }
    return group_take(grp, dev, size);
}

static void outer_give(void *ctx, uint64_t size) { group_give(grp, *(const int *)ctx, size); }

void shim_group_join(void)
{
    if (!*shim_cfg.group)
        return;
    const char *why = NULL;
    uint64_t limit = 0;
    char c[32];
    grp = group_join(shim_cfg.group, shim_cfg.group_max, &limit, &why);
    if (!grp) {
        shim_log_always(SHIM_LOG_ERROR, "CUPOOL_GROUP=%s: cannot join: %s; this process "
                        "runs under its own cap only", shim_cfg.group, why);
        return;
    }
    if (shim_cfg.group_max && limit != shim_cfg.group_max)
        shim_log_always(SHIM_LOG_WARN, "CUPOOL_GROUP=%s: the group's budget is %s per "
                        "device, set by its first member; CUPOOL_GROUP_MAX_RESERVED is "
                        "ignored", shim_cfg.group, limit ? stats_fmt_bytes(limit, c, sizeof(c))
                        : "none");
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        dev_ids[i] = i;
        outers[i] = (pool_budget_outer){outer_take, outer_give, &dev_ids[i]};
        shim_devices[i].budget.outer = &outers[i];
    }
    shim_log(SHIM_LOG_INFO, "member of group %s, budget %s per device", shim_cfg.group,
             limit ? stats_fmt_bytes(limit, c, sizeof(c)) : "none");
}

void shim_group_leave(void)
{
    group_leave(grp); /* grp stays: the helper may still be running */
}

void shim_group_forget(void)
{
    group_forget(grp);
    grp = NULL;
}

/* Whether size more bytes fit the group's budget on dev now. */
static bool room(int dev, size_t size)
{
    uint64_t lim = group_limit(grp), held = group_held(grp, dev);
    return size <= lim && held <= lim - size;
}

/* Whether the device has size bytes free now (a member that ended gives
 * its memory back only as its process goes, after it left the group). */
static bool device_room(int dev, size_t size)
{
    size_t f = 0, t = 0;
    return shim_device_mem_info(dev, &f, &t) == 0 && f >= size;
}

/* The device refused: ask the others to flush, and wait for the device to
 * have room (their flushes, or a member's process ending). */
static bool device_reclaim(int dev, size_t size)
{
    uint64_t tickets[GROUP_MEMBERS];
    group_ask_others(grp, tickets);
    struct timespec tick = {0, 5 * 1000000L};
    for (int waited = 0; waited < SHIM_GROUP_WAIT_MS; waited += 5) {
        nanosleep(&tick, NULL);
        if (device_room(dev, size))
            return true;
    }
    return false;
}

bool shim_group_reclaim(int dev, size_t size, bool device_full)
{
    if (!grp)
        return false;
    if (device_full) {
        shim_count(SHIM_group_reclaims);
        return device_reclaim(dev, size);
    }
    if (!group_limit(grp) || room(dev, size))
        return false; /* the process's own cap refused, not the group */
    shim_count(SHIM_group_reclaims);
    uint64_t tickets[GROUP_MEMBERS];
    if (group_ask_others(grp, tickets) == 0)
        return false;
    /* Until the room is there, or every member asked has flushed (what
     * it could give is given), or the wait is over. */
    struct timespec tick = {0, 5 * 1000000L};
    for (int waited = 0; waited < SHIM_GROUP_WAIT_MS; waited += 5) {
        nanosleep(&tick, NULL);
        if (room(dev, size))
            return true;
        if (group_answered(grp, tickets))
            return room(dev, size);
    }
    return false;
}

uint64_t shim_group_tick(void)
{
    if (!grp)
        return 0;
    static uint64_t last_reap;
    uint64_t now = shim_mono_ns();
    if (now - last_reap >= 1000000000u) {
        group_reap(grp);
        last_reap = now;
    }
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        pool_stats ps;
        if (shim_device_stats(i, &ps))
            group_set_cached(grp, i, ps.cached);
    }
    return group_flush_pending(grp);
}

void shim_group_flushed(uint64_t ticket)
{
    if (grp)
        group_flush_answer(grp, ticket);
}

void shim_group_report(int dev, size_t size, char *buf, size_t len)
{
    buf[0] = '\0';
    group_view *v = grp ? calloc(1, sizeof(*v)) : NULL;
    if (v)
        group_view_of(grp, shim_cfg.group, v);
    if (!v || !v->limit || room(dev, size)) {
        free(v);
        return;
    }
    char a[32], b[32], c[32];
    uint64_t held = 0;
    for (uint32_t i = 0; i < v->nmembers; i++)
        held += v->members[i].held[dev];
    size_t n = (size_t)snprintf(buf, len, "\n  group %s: budget %s, held %s:", v->name,
                                stats_fmt_bytes(v->limit, a, sizeof(a)),
                                stats_fmt_bytes(held, b, sizeof(b)));
    for (uint32_t i = 0; i < v->nmembers && n < len; i++) {
        const group_member_view *m = &v->members[i];
        char comm[16];
        n += (size_t)snprintf(buf + n, len - n, "%s pid %d (%s) holds %s, caches %s",
                              i ? ";" : "", m->pid, stats_printable(m->comm, comm, sizeof(comm)),
                              stats_fmt_bytes(m->held[dev], a, sizeof(a)),
                              stats_fmt_bytes(m->cached[dev], c, sizeof(c)));
    }
    free(v);
}
