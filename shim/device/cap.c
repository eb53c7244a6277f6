/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cap.c - see cap.h.
 */
#include <errno.h>

#include "cap.h"
#include "devstate.h"
#include "driver.h"
#include "group.h"
#include "log.h"
#include "process.h"
#include "stats.h"

static const shim_cap *cap_option(int dev)
{
    return shim_cfg.has_dev_cap[dev] ? &shim_cfg.max_reserved_dev[dev]
                                     : &shim_cfg.max_reserved;
}

uint64_t shim_cap_set(int dev, uint64_t total)
{
    shim_device *d = &shim_devices[dev];
    uint64_t cap = shim_cap_bytes(cap_option(dev), total);
    uint64_t alone = shim_group_alone_cap(dev, total); /* a group it could not meet */
    if (alone && (!cap || alone < cap))
        cap = alone;
    pool_budget_set_limit(&d->budget, cap);
    atomic_store(&d->cap_known, true);
    return cap;
}

uint64_t shim_cap_limit(int dev)
{
    shim_device *d = &shim_devices[dev];
    if (atomic_load(&d->cap_known))
        return pool_budget_limit(&d->budget);
    if (!cap_option(dev)->percent && !shim_group_alone_percent(dev))
        return shim_cap_set(dev, 0);
    size_t f = 0, t = 0;
    if (shim_drv_resolve() != 0 || shim_drv.cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS)
        return 0;
    return shim_cap_set(dev, t);
}

/* Returns the idle segments of every shard of dev (the device's cap covers
 * them all): whether any went back. */
static bool idle_returned(int dev)
{
    return shim_device_shard_if_any(dev, 0) && shim_device_flush(dev) > 0;
}

/* Counts size bytes passed on, taken from the budget already. */
static void passed_add(shim_device *d, uint64_t size)
{
    uint64_t now = atomic_fetch_add(&d->passed, size) + size;
    uint64_t peak = atomic_load(&d->passed_peak);
    while (now > peak && !atomic_compare_exchange_weak(&d->passed_peak, &peak, now))
        ;
}

int shim_cap_take_passed(int dev, size_t size, const char *call)
{
    shim_device *d = &shim_devices[dev];
    if (!call) {
        pool_budget_charge(&d->budget, size);
        passed_add(d, size);
        return 0;
    }
    /* Never makes the pool (its creation calls the runtime, which may be
     * the caller, holding its locks: NCCL's and the runtime's own
     * cuMemCreate come here); the cap is known without it. */
    uint64_t cap = shim_cap_limit(dev);
    /* Only the device's own idle segments are reclaimed here, never the
     * group's: the caller may hold the runtime's locks, which another
     * member's flush, or this process's helper, could need. */
    for (int round = 0;; round++) {
        shim_group_try();
        if (pool_budget_take(&d->budget, size) == 0) {
            passed_add(d, size);
            return 0;
        }
        if (round == 0)
            shim_device_count(d, SHIM_DEV_cap_refusals, 1);
        if (round == 1 || !idle_returned(dev))
            break;
    }
    char rq[32], c[32], r[32], p[32], group[1024] = "";
    bool by_group = shim_group_refused();
    if (by_group) /* the group's line: its budget, and who holds it */
        shim_group_report(dev, size, true, group, sizeof(group));
    shim_log(SHIM_LOG_ERROR, "device %d: %s(%s) refused: %s%s would be exceeded (pool "
             "reserved %s, passed on %s)%s", dev, call, stats_fmt_bytes(size, rq, sizeof(rq)),
             by_group ? "the group's budget (CUPOOL_GROUP)" : "the cap ",
             by_group ? "" : stats_fmt_bytes(cap, c, sizeof(c)),
             stats_fmt_bytes(atomic_load(&d->reserved), r, sizeof(r)),
             stats_fmt_bytes(atomic_load(&d->passed), p, sizeof(p)), group);
    return -EDQUOT;
}

void shim_cap_give_passed(int dev, size_t size)
{
    shim_device *d = &shim_devices[dev];
    atomic_fetch_sub(&d->passed, size);
    pool_budget_give(&d->budget, size);
}

void shim_cap_forget_passed(int dev)
{
    shim_device *d = &shim_devices[dev];
    pool_budget_give(&d->budget, atomic_exchange(&d->passed, 0));
}

bool shim_cap_reclaim(int dev, size_t size, int err, int round)
{
    if (err != -EDQUOT && err != -ENOMEM)
        return false;
    if (round == 0 && err == -EDQUOT)
        shim_device_count(&shim_devices[dev], SHIM_DEV_cap_refusals, 1);
    /* Round 0: the idle segments of every shard (a pool that refused has
     * returned its own already; the device's cap covers them all). */
    if (round == 0 && idle_returned(dev))
        return true;
    /* The process's own cap refused: only its own memory could help. */
    if (err == -EDQUOT && !shim_group_refused())
        return false;
    /* The group's budget or the device refused: the group, up to three
     * times (its members' flushes; after a member that ended left the
     * budget, its process giving the device back). */
    return round < 3 && shim_group_reclaim(dev, size, err == -ENOMEM);
}

void shim_cap_view_of(int dev, shim_cap_view *v)
{
    shim_device *d = &shim_devices[dev];
    v->limit = pool_budget_limit(&d->budget);
    v->passed = atomic_load(&d->passed);
    v->passed_peak = atomic_load(&d->passed_peak);
}
