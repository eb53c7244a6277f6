/* SPDX-License-Identifier: Apache-2.0 */
/*
 * group.h - CUPOOL_GROUP: this process as a member of a group of
 * processes that share one budget per device (group/groupseg.h holds the
 * segment). Every byte the device's budget takes (pool segments, memory
 * passed on) is taken from the group's too; when the group's budget
 * refuses, the process returns its own cache (the pool does so for any
 * cap), then asks the other members to flush theirs, framework caches
 * included, and waits a bounded time for the budget to fall.
 */
#ifndef CUPOOL_SHIM_GROUP_H
#define CUPOOL_SHIM_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The wait for room once the device refused with no member to ask (one
 * may just have ended), in milliseconds. A wait for asked members'
 * flushes lasts until they answer, up to SHIM_GROUP_END_WAIT_MS (a
 * framework's release may take up to SHIM_FRAMEWORK_WAIT_MS of it). */
#define SHIM_GROUP_WAIT_MS 3000
/* A waiter for a turn looks for room this often; asks each other member
 * to flush again (for what it lacks) this often once that member answered
 * its last request, a member waiting itself left out; and fails, the
 * last of a group whose every member waits, once that lasted this long. */
#define SHIM_GROUP_POLL_MS 5
#define SHIM_GROUP_ASK_MS 20
#define SHIM_GROUP_STUCK_MS 50
/* The longest wait for asked members' answers, and the wait while a
 * member is ending: its program done (an interpreter finalizing), its
 * process still holding its memory until it goes. */
#define SHIM_GROUP_END_WAIT_MS 15000

/* Joins CUPOOL_GROUP if set, before any budget is used. A member that
 * cannot meet its group (no place to hold it, a full /dev/shm) says so and
 * holds itself to the budget it asked for the group
 * (CUPOOL_GROUP_MAX_RESERVED[_N]) as a cap of its own, beside its own
 * cap: the budget is never silently off. */
void shim_group_join(void);
/* The budget a member that could not meet its group holds itself to on
 * dev, in bytes (total: the device's memory, for a percentage); 0 when it
 * met its group or asked for none. */
uint64_t shim_group_alone_cap(int dev, uint64_t total);
/* Whether that budget on dev is a percentage (it needs the device's size). */
bool shim_group_alone_percent(int dev);
/* Leaves the group (exit), or forgets it (a forked child). */
void shim_group_leave(void);
void shim_group_forget(void);

/* After the group's budget (or, device_full, the device itself: the
 * members share it) refused size bytes on dev: true once the other
 * members' flushes (or a member's end) made room, or room is there
 * already (retry); false if there is no group, or no room came in time.
 * Refused by the budget, the member asks the others to flush, then waits
 * for its turn (first come, first served among the members waiting on
 * dev) up to CUPOOL_GROUP_WAIT, asking again while it waits: a member
 * idle by then returns its framework's cache too. It fails at once when
 * size exceeds the whole budget, when it is alone, and when every other
 * member waits as well, each for an earlier turn (a deadlock: this one
 * arrived last). Under CUPOOL_GROUP_WAIT=0, or when the device refused,
 * it waits only for the flushes' answers (up to SHIM_GROUP_END_WAIT_MS;
 * with no member to ask, SHIM_GROUP_WAIT_MS for one just ended to go). */
bool shim_group_reclaim(int dev, size_t size, bool device_full);
/* Ends the turn a reclaim gave this thread (its place in the queue, kept
 * while it allocates): after the allocation that followed it, taken or
 * not. Nothing when it holds none. */
void shim_group_turn_done(void);

/* Why the calling thread's last reclaim found no room, for its report. */
const char *shim_group_cause(void);

/* Helper thread, every tick: publishes this member's cache, and returns
 * the ticket of a flush another member asked for (0: none), with what it
 * wants into *want (framework.h), to answer with shim_group_flushed once
 * flushed. */
uint64_t shim_group_tick(uint64_t *want);
void shim_group_flushed(uint64_t ticket);
/* Whether a member of the group waits for its turn now (the helper then
 * serves the members' requests every 2 * SHIM_GROUP_POLL_MS). */
bool shim_group_waiters(void);

/* Marks this member as ending (its program is done: framework.h's
 * shim_framework_ending); the helper's, each tick. */
void shim_group_ending(void);

/* A try to take from the device's budget begins on this thread (an
 * allocation's, or memory passed on); after it, whether the group's budget
 * refused during it (a refusal with this false was the process's own
 * cap). */
void shim_group_try(void);
bool shim_group_refused(void);

/* One line naming the group's budget and each member's pid, command, held
 * and cached bytes on dev, into buf; "" when there is no group, or when
 * size bytes fit its budget now and refused is false (refused: it is
 * known to have refused, shim_group_refused; the members' memory may have
 * moved since). */
void shim_group_report(int dev, size_t size, bool refused, char *buf, size_t len);

#endif
