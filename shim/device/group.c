/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group.c - see group.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "devstate.h"
#include "group.h"
#include "log.h"
#include "process.h"
#include "stats.h"
#include "groupseg.h"

static group *grp;  /* set once at start-up, before any budget is used */
static int dev_ids[SHIM_MAX_DEVICES];
static pool_budget_outer outers[SHIM_MAX_DEVICES];
static _Atomic uint64_t totals[SHIM_MAX_DEVICES]; /* device sizes, once known */

/* The group's budget on dev in bytes (0 = none): a percentage resolved
 * with the device's size, asked once (the members share the device). */
static uint64_t limit_of(int dev)
{
    group_cap c = group_cap_of(grp, dev);
    if (!c.percent)
        return c.bytes;
    uint64_t total = atomic_load(&totals[dev]);
    size_t f = 0, t = 0;
    if (!total && shim_device_mem_info(dev, &f, &t) == 0 && t)
        atomic_store(&totals[dev], total = t);
    /* Unknown while the device cannot say (the process's own cap holds). */
    return total / 100 * c.percent;
}

/* Whether the group's budget refused this thread since its last try
 * began (shim_group_try): which budget a refusal was, for the reclaim and
 * the report, where a look at the budgets afterwards could misjudge (the
 * members' memory moves, and a segment is larger than the request). */
static _Thread_local bool refused_here;

static int outer_take(void *ctx, uint64_t size, bool force)
{
    int dev = *(const int *)ctx;
    if (force) {
        group_charge(grp, dev, size);
        return 0;
    }
    int r = group_take(grp, dev, size, limit_of(dev));
    refused_here |= r != 0;
    return r;
}

void shim_group_try(void) { refused_here = false; }

bool shim_group_refused(void) { return refused_here; }

static void outer_give(void *ctx, uint64_t size) { group_give(grp, *(const int *)ctx, size); }

/* Whether this member could not meet its group and holds itself to the
 * budget it asked for (shim_group_alone_cap). Set once at start-up. */
static bool alone;

static const shim_cap *group_option(int dev)
{
    return dev < SHIM_MAX_DEVICES && shim_cfg.has_group_dev[dev] ? &shim_cfg.group_max_dev[dev]
                                                                 : &shim_cfg.group_max;
}

uint64_t shim_group_alone_cap(int dev, uint64_t total)
{
    return alone ? shim_cap_bytes(group_option(dev), total) : 0;
}

bool shim_group_alone_percent(int dev) { return alone && group_option(dev)->percent; }

/* The budgets the options ask for, one per device. */
static void caps_asked(group_cap *caps)
{
    for (int i = 0; i < STATS_MAX_DEVICES; i++) {
        const shim_cap *c = group_option(i);
        caps[i] = (group_cap){c->bytes, c->percent, 0};
    }
}

void shim_group_join(void)
{
    if (!*shim_cfg.group)
        return;
    const char *why = NULL;
    group_cap asked[STATS_MAX_DEVICES], caps[STATS_MAX_DEVICES];
    caps_asked(asked);
    memcpy(caps, asked, sizeof(caps));
    grp = group_join(shim_cfg.group, caps, &why);
    char text[256];
    group_caps_text(grp ? caps : asked, text, sizeof(text));
    group_cap none[STATS_MAX_DEVICES] = {{0}};
    if (!grp) {
        alone = memcmp(asked, none, sizeof(none)) != 0;
        shim_log_always(SHIM_LOG_ERROR, "CUPOOL_GROUP=%s: cannot join: %s; %s%s%s",
                        shim_cfg.group, why, alone ? "this process holds itself alone to "
                        "the group's budget, " : "this process runs under its own cap only "
                        "(it asked the group for no budget)", alone ? text : "",
                        alone ? ", as a cap of its own" : "");
        return;
    }
    if (memcmp(asked, none, sizeof(none)) && memcmp(asked, caps, sizeof(caps)))
        shim_log_always(SHIM_LOG_WARN, "CUPOOL_GROUP=%s: the group's budget is %s, set by "
                        "its first member; CUPOOL_GROUP_MAX_RESERVED is ignored",
                        shim_cfg.group, text);
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        dev_ids[i] = i;
        outers[i] = (pool_budget_outer){outer_take, outer_give, &dev_ids[i]};
        shim_devices[i].budget.outer = &outers[i];
    }
    const char *passed, *where = group_where(grp, &passed);
    if (passed)
        shim_log_always(SHIM_LOG_WARN, "CUPOOL_GROUP=%s: the page directory cannot hold the "
                        "group (%s): it meets in %s", shim_cfg.group, passed, where);
    shim_log(SHIM_LOG_INFO, "member of group %s in %s, budget %s", shim_cfg.group, where, text);
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
    uint64_t lim = limit_of(dev), held = group_held(grp, dev);
    return !lim || (size <= lim && held <= lim - size);
}

/* Whether the device has size bytes free now (a member that ended gives
 * its memory back only as its process goes, after it left the group). */
static bool device_room(int dev, size_t size)
{
    size_t f = 0, t = 0;
    return shim_device_mem_info(dev, &f, &t) == 0 && f >= size;
}

/* Waits for room on dev for size bytes (fits: the group's budget, or the
 * device itself): until every member asked (tickets) has answered or is
 * gone, up to SHIM_GROUP_END_WAIT_MS (a loaded machine's answers come
 * late: with 3 s, a member ending under a sanitizer answered after it);
 * with none asked (NULL), SHIM_GROUP_WAIT_MS; while a member is ending
 * (its program done, its process still holding its memory), up to
 * SHIM_GROUP_END_WAIT_MS, for it to go. */
/* When a member was last seen ending: one that left the budget may still
 * hold the device until its process is gone. */
static _Atomic uint64_t ending_seen_ns;

static bool wait_room(int dev, size_t size, bool (*fits)(int, size_t),
                      const uint64_t *tickets)
{
    struct timespec tick = {0, 5 * 1000000L};
    bool ending = false;
    for (int waited = 0; waited < SHIM_GROUP_END_WAIT_MS; waited += 5) {
        nanosleep(&tick, NULL);
        if (fits(dev, size))
            return true;
        if (group_ending_held(grp, dev) > 0) {
            ending = true;
            atomic_store(&ending_seen_ns, shim_mono_ns());
        }
        if (!ending && (tickets ? group_answered(grp, tickets) : waited >= SHIM_GROUP_WAIT_MS))
            return fits(dev, size);
    }
    return false;
}

/* How the calling thread's last reclaim ended, for its report: room for
 * the request (the retry was refused all the same: the pool asks for a
 * segment), its wait ran out (or, with no wait, the flushes were
 * answered), a deadlock, no other member to ask, or more than the whole
 * budget. */
static _Thread_local enum {
    ENDED_ROOM, ENDED_TIMEOUT, ENDED_DEADLOCK, ENDED_ALONE, ENDED_TOO_LARGE
} ended;

/* The bytes size lacks on dev now (size, if the budget is unknown). */
static uint64_t shortfall(int dev, size_t size)
{
    uint64_t lim = limit_of(dev), held = group_held(grp, dev);
    return lim && held <= lim && size > lim - held ? size - (lim - held) : size;
}

/* Whether this thread's turn came and it still holds its place in the
 * queue while it takes the memory (shim_group_turn_done ends it), and the
 * thread's cancel state before its wait: no cancellation while it waits
 * or holds a place, which would leave the place taken for the process's
 * life. */
static _Thread_local bool turn_held;
static _Thread_local int turn_cancel;

/* Waits for a turn on dev for size bytes (group.h): true once this member
 * is first among the waiters on dev and the budget has room; it keeps its
 * place until shim_group_turn_done, so that the next waiter cannot take
 * the room between this turn and its allocation. Asks the
 * others again, for the shortfall, every SHIM_GROUP_ASK_MS, each once it
 * answered its last request (group_ask_others); reaps dead members every
 * SHIM_GROUP_POLL_MS * 10. */
static bool wait_turn(int dev, size_t size, uint64_t *tickets)
{
    if (!turn_held)
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &turn_cancel);
    group_wait_begin(grp, dev, size);
    shim_gauge_set(SHIM_group_waiting_bytes, size);
    shim_gauge_set(SHIM_group_waiting_since, shim_unix_ns());
    uint64_t t0 = shim_mono_ns() / 1000000u, asked_at = t0, stuck_at = 0;
    struct timespec tick = {0, SHIM_GROUP_POLL_MS * 1000000L};
    ended = ENDED_TIMEOUT;
    for (unsigned polls = 1;; polls++) {
        nanosleep(&tick, NULL);
        uint64_t now = shim_mono_ns() / 1000000u;
        if (polls % 10 == 0)
            group_reap(grp);
        if (group_wait_first(grp, dev) && room(dev, size)) {
            ended = ENDED_ROOM;
            break;
        }
        /* Every other member waits for an earlier turn: nobody frees
         * anything. Held for a few polls, so that a waiter about to take
         * its turn is not taken for stuck. */
        if (!group_wait_stuck(grp, dev, limit_of(dev)))
            stuck_at = 0;
        else if (!stuck_at)
            stuck_at = now;
        else if (now - stuck_at >= SHIM_GROUP_STUCK_MS) {
            ended = ENDED_DEADLOCK;
            break;
        }
        if (now - t0 >= shim_cfg.group_wait_ms)
            break;
        if (now - asked_at >= SHIM_GROUP_ASK_MS) { /* each member once it answered */
            group_ask_others(grp, tickets, shortfall(dev, size));
            asked_at = now;
        }
    }
    turn_held = ended == ENDED_ROOM;
    if (turn_held) {
        group_wait_taking(grp);
    } else {
        group_wait_end(grp);
        pthread_setcancelstate(turn_cancel, NULL);
    }
    shim_gauge_set(SHIM_group_waiting_since, 0);
    shim_gauge_set(SHIM_group_waiting_bytes, 0);
    return ended == ENDED_ROOM;
}

bool shim_group_reclaim(int dev, size_t size, bool device_full)
{
    if (!grp)
        return false;
    uint64_t tickets[GROUP_MEMBERS];
    ended = ENDED_TIMEOUT;
    if (device_full) {
        /* The device refused: the members share it. Its room comes from
         * their flushes, or a member's process ending; a turn this thread
         * holds is given up meanwhile (the budget was not what refused). */
        shim_group_turn_done();
        int asked = group_ask_others(grp, tickets, 0);
        uint64_t since = shim_mono_ns() - atomic_load(&ending_seen_ns);
        if (!asked && !group_ending_held(grp, dev) &&
            since > (uint64_t)SHIM_GROUP_END_WAIT_MS * 1000000u)
            return false; /* alone, and no member just ended: nothing will make room */
        shim_count(SHIM_group_reclaims);
        return wait_room(dev, size, device_room, asked ? tickets : NULL);
    }
    if (room(dev, size)) { /* room came since the refusal (a member's flush) */
        ended = ENDED_ROOM;
        return true;
    }
    uint64_t lim = limit_of(dev);
    if (lim && size > lim) { /* more than the whole budget: no turn would do */
        ended = ENDED_TOO_LARGE;
        return false;
    }
    shim_count(SHIM_group_reclaims);
    if (group_ask_others(grp, tickets, 0) == 0) {
        ended = ENDED_ALONE;
        return false;
    }
    if (!shim_cfg.group_wait_ms)
        return wait_room(dev, size, room, tickets);
    return wait_turn(dev, size, tickets);
}

void shim_group_turn_done(void)
{
    if (!turn_held)
        return;
    if (grp)
        group_wait_end(grp);
    turn_held = false;
    pthread_setcancelstate(turn_cancel, NULL);
}

uint64_t shim_group_tick(uint64_t *want)
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
    return group_flush_pending(grp, want);
}

bool shim_group_waiters(void) { return grp && group_waiting(grp); }

void shim_group_ending(void)
{
    if (grp)
        group_set_ending(grp);
}

void shim_group_flushed(uint64_t ticket)
{
    if (grp)
        group_flush_answer(grp, ticket);
}

void shim_group_report(int dev, size_t size, bool refused, char *buf, size_t len)
{
    buf[0] = '\0';
    group_view *v = grp ? calloc(1, sizeof(*v)) : NULL;
    if (v)
        group_view_of(grp, shim_cfg.group, v);
    if (!v || (!refused && room(dev, size))) {
        free(v);
        return;
    }
    char a[32], b[32], c[32];
    uint64_t held = 0;
    for (uint32_t i = 0; i < v->nmembers; i++)
        held += v->members[i].held[dev];
    size_t n = (size_t)snprintf(buf, len, "\n  group %s: budget %s, held %s:", v->name,
                                stats_fmt_bytes(limit_of(dev), a, sizeof(a)),
                                stats_fmt_bytes(held, b, sizeof(b)));
    for (uint32_t i = 0; i < v->nmembers && n < len; i++) {
        const group_member_view *m = &v->members[i];
        char comm[16];
        n += (size_t)snprintf(buf + n, len - n, "%s pid %d (%s%s) holds %s, caches %s",
                              i ? ";" : "", m->pid, text_printable(m->comm, comm, sizeof(comm)),
                              m->ending ? ", ending" : "",
                              stats_fmt_bytes(m->held[dev], a, sizeof(a)),
                              stats_fmt_bytes(m->cached[dev], c, sizeof(c)));
        if (m->wait_seq && n < len)
            n += (size_t)snprintf(buf + n, len - n, ", waits for %s on device %d",
                                  stats_fmt_bytes(m->wait_bytes, a, sizeof(a)), m->wait_dev);
    }
    free(v);
}

const char *shim_group_cause(void)
{
    if (ended == ENDED_DEADLOCK)
        return "the group's budget (CUPOOL_GROUP): every other member waits for a turn "
               "too, each holding what the others need (a deadlock); this one, the last "
               "to arrive, fails so that they can go on";
    if (ended == ENDED_TIMEOUT && shim_cfg.group_wait_ms)
        return "the group's budget (CUPOOL_GROUP): the other members' memory stayed in "
               "use for all of CUPOOL_GROUP_WAIT";
    if (ended == ENDED_ROOM) /* the request fits, what the pool asked for did not */
        return "the group's budget (CUPOOL_GROUP): less of it is left than the new "
               "segment this request needs";
    if (ended == ENDED_ALONE)
        return "the group's budget (CUPOOL_GROUP), this process its only member (no other "
               "to make room)";
    if (ended == ENDED_TOO_LARGE)
        return "the group's budget (CUPOOL_GROUP): the request is larger than the whole "
               "budget";
    return "the group's budget (CUPOOL_GROUP), after its other members flushed";
}
