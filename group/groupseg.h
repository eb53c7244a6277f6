/* SPDX-License-Identifier: Apache-2.0 */
/*
 * groupseg.h - one budget for several processes: the group segment.
 *
 * Processes of one user that set the same CUPOOL_GROUP=NAME share, per
 * device, one budget held in a small shared file, group-<pid namespace>-NAME
 * in a directory of the user's own (mode 0700, so no other user can open,
 * read, join, inflate or shrink it), checked as a page is (a regular file
 * of the user, 0600, one link, the exact size, the right header) and built
 * under a temporary name before it is linked into place. The directory is
 * the user's page directory (stats_user_dir); where another user made a
 * directory of that name first, so that it cannot be had, the group meets
 * in $XDG_RUNTIME_DIR/cupool, else in $HOME/.cache/cupool (there the file
 * is group-<boot id>-<pid namespace>-NAME), which no other user can write
 * in. Every member, and every reader, looks in that order and joins the
 * first that holds the group, so all find the same file.
 *
 * Each member holds a slot: its pid and start time (which name it for its
 * life: a pid reused later has another start time), what it holds and
 * caches per device, and a flush request counter. What the group holds is
 * the sum of its live members' slots, taken under a robust process-shared
 * mutex, so that no two members both pass the budget, and a member killed
 * inside it leaves the lock usable. A member that died holds nothing: its
 * slot is reaped when the budget would be passed, by every member's helper
 * once a second, and by readers.
 *
 * Knows nothing of CUDA: the shim (shim/device/group.c) and cupool stat use it.
 */
#ifndef CUPOOL_STATS_GROUPSEG_H
#define CUPOOL_STATS_GROUPSEG_H

#include <stdbool.h>
#include <stdint.h>

#include "stats.h"

#define GROUP_MEMBERS 64
#define GROUP_NAME_MAX 64

typedef struct group group;

/* A group's budget on one device: none (both 0), bytes, or a percentage
 * of the device's memory (each member resolves it with its device's size:
 * the members share the device). */
typedef struct group_cap {
    uint64_t bytes;
    uint32_t percent, pad;
} group_cap;

/* Whether name can name a group: 1 to 64 of [A-Za-z0-9._-], not starting
 * with '.'. */
bool group_name_ok(const char *name);

/* Joins group name of this user, making it with the budgets caps (one per
 * device, STATS_MAX_DEVICES of them) if it does not exist, or setting them
 * when no member of it lives (the segment outlives its members: a group
 * whose members all ended starts again with its next first member's
 * budget); a member of a group with a live member takes the group's (into
 * caps). Returns the group, or NULL with *why. */
group *group_join(const char *name, group_cap *caps, const char **why);

/* The directory the group met in; *passed gets why the user's page
 * directory was not it (it is another user's, ...) or NULL. */
const char *group_where(const group *g, const char **passed);

/* Leaves the group: the slot and everything it held are free; or, while
 * it holds memory, marked ending until its process is gone (the device is
 * not free of that memory before it is). At exit only: g stays allocated
 * and mapped (other threads may still hold it), and every call on it
 * after does nothing. */
void group_leave(group *g);
/* Forgets the group in a forked child (the parent's slot stays). */
void group_forget(group *g);

/* Takes size bytes of device dev for this member: 0, or -EDQUOT when the
 * live members would hold more than limit (the group's budget on dev
 * resolved; 0 = none). */
int group_take(group *g, int dev, uint64_t size, uint64_t limit);
/* Adds size bytes held already, whatever the limit. */
void group_charge(group *g, int dev, uint64_t size);
/* Gives back size bytes taken or charged. */
void group_give(group *g, int dev, uint64_t size);

/* The group's budget on dev. */
group_cap group_cap_of(const group *g, int dev);
/* What the live members hold on dev now (reaping the dead). */
uint64_t group_held(group *g, int dev);
/* Publishes what this member caches on dev (what a flush would return). */
void group_set_cached(group *g, int dev, uint64_t cached);

/* Asks every other live member to flush (want: 0 = everything, or the
 * shortfall of a member asking again while it waits, which a member
 * flushes for only where that is worth it: framework.h; asked again, a
 * member is left out while its last request is unanswered or while it
 * waits for a turn itself); returns how many were asked. tickets (GROUP_MEMBERS of them) gets each asked slot's
 * ticket, 0 for the others. */
int group_ask_others(group *g, uint64_t *tickets, uint64_t want);
/* Whether every member asked with tickets has flushed since, or died. */
bool group_answered(group *g, const uint64_t *tickets);
/* The newest flush request of this member not yet answered, or 0; what
 * the requests want into *want. */
uint64_t group_flush_pending(group *g, uint64_t *want);
void group_flush_answer(group *g, uint64_t ticket);
/* Waiting for a turn: a member refused because the others' memory is in
 * use takes the next turn (group_wait_begin: bytes on dev, since now) and
 * may take memory on dev only while no live member with an earlier turn
 * waits on dev (group_wait_first): first come, first served. A waiter
 * that dies leaves the queue with its slot. Once its turn came, a member
 * keeps its place while it takes the memory (group_wait_taking), so that
 * the next waiter cannot take the room first; it leaves the queue when its
 * take is done or failed (group_wait_end), and a wait begun again before
 * that keeps the place. group_wait_stuck: every other live member waits
 * too (none ending, none taking its turn, and the first waiter on dev's
 * request not within dev's budget lim now; lim 0: unknown), each with an
 * earlier turn: nobody will free anything, and this member, the last to
 * arrive, should fail. */
void group_wait_begin(group *g, int dev, uint64_t bytes);
void group_wait_taking(group *g);
void group_wait_end(group *g);
/* Whether any live member waits for a turn (read without the lock). */
bool group_waiting(group *g);
bool group_wait_first(group *g, int dev);
bool group_wait_stuck(group *g, int dev, uint64_t lim);

/* Marks this member as ending: its program is done (an interpreter
 * finalizing), its process gives its memory back only as it goes. */
void group_set_ending(group *g);
/* What the other live members that are ending hold on dev. */
uint64_t group_ending_held(group *g, int dev);
/* Frees the slots of members that died. Returns how many. */
int group_reap(group *g);

/* ---- readers (cupool stat --group) ---------------------------------------- */

typedef struct group_member_view {
    int32_t pid;
    bool ending;
    int32_t wait_dev;        /* while wait_seq: the device it waits on */
    uint64_t wait_seq;       /* its turn; 0 = not waiting */
    bool wait_taking;        /* its turn came: it takes the memory now */
    uint64_t wait_bytes, wait_since_ns;
    char comm[16];
    uint64_t held[STATS_MAX_DEVICES], cached[STATS_MAX_DEVICES];
} group_member_view;

typedef struct group_view {
    char name[GROUP_NAME_MAX + 1];
    group_cap caps[STATS_MAX_DEVICES];
    uint32_t nmembers;
    group_member_view members[GROUP_MEMBERS];
} group_view;

/* A budget in words: "none", "80%" or a size such as "76.00 GiB". */
const char *group_cap_text(group_cap c, char *buf, size_t len);
/* The budgets of every device in words: "<device 0's> per device", then
 * each device's that differs ("..., 40.00 GiB on device 1"). */
void group_caps_text(const group_cap *caps, char *buf, size_t len);

/* The same of a group joined (named name), through its mapping. */
void group_view_of(group *g, const char *name, group_view *v);

/* Reads group name of this user (reaping dead members): 0, -ENOENT (no
 * such group), -EPERM or -EPROTO (a file there that is not a group
 * segment this version reads). */
int group_read(const char *name, group_view *v);

#endif
