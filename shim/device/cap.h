/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cap.h - the cap's one owner. CUPOOL_MAX_RESERVED (CUPOOL_MAX_RESERVED_<N>)
 * becomes each device's budget (pool/budget.h), whose limit is set here
 * once the device's size is known. Every byte the device holds is taken
 * from that budget: pool segments by the device's pools (every shard's),
 * memory passed on (stream-ordered, managed, pitched, cuMemCreate: passed.c)
 * here; a group's budget (group.h) rides on it as its outer hook. When a
 * take is refused, shim_cap_reclaim is the one way back: the device's idle
 * segments in every shard first, then the group's other members.
 */
#ifndef CUPOOL_SHIM_CAP_H
#define CUPOOL_SHIM_CAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sets dev's limit from the options, given the device's size in bytes
 * (0: unknown, which a percentage then waits for); returns it. */
uint64_t shim_cap_set(int dev, uint64_t total);

/* dev's cap in bytes (0 = none), without making its pool: the limit once
 * set, else from the options (a share of the device asks the driver its
 * size, which takes none of the runtime's locks; 0 if it cannot tell
 * yet). */
uint64_t shim_cap_limit(int dev);

/* Takes size bytes passed on for call (named in the refusal's line), after
 * returning the device's idle segments where that helps (not the group's:
 * the caller may hold the runtime's locks): 0 or -EDQUOT. With call NULL,
 * charges bytes already allocated, whatever the limit. */
int shim_cap_take_passed(int dev, size_t size, const char *call);
/* Gives back size bytes passed on; or every byte passed on (a reset). */
void shim_cap_give_passed(int dev, size_t size);
void shim_cap_forget_passed(int dev);

/* After dev refused size bytes with err (-EDQUOT: the cap or the group;
 * -ENOMEM: the device), the step of round (0, 1, 2, ...) that may make
 * room: true if it did, or may have (retry), false once nothing is left
 * to try. Holds no lock of cupool's. */
bool shim_cap_reclaim(int dev, size_t size, int err, int round);

/* What the cap knows of dev: its limit, the bytes passed on, their peak. */
typedef struct shim_cap_view {
    uint64_t limit, passed, passed_peak;
} shim_cap_view;
void shim_cap_view_of(int dev, shim_cap_view *v);

#endif
