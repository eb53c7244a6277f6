/* SPDX-License-Identifier: Apache-2.0 */
/*
 * owner.h - which pool holds an address: a hint kept per 2 MiB of address
 * space, so that a free goes to the owning device's shard at once instead of
 * asking shard after shard.
 *
 * A hint is never trusted: the pool it names is asked, and if that pool
 * does not own the address the caller asks the others as before. So a hint
 * may be missing (a granule shared by two pools' segments, a device reset)
 * or stale without harm. Lock-free: one atomic load per lookup.
 */
#ifndef CUPOOL_SHIM_OWNER_H
#define CUPOOL_SHIM_OWNER_H

#include <stddef.h>
#include <stdint.h>

/* Records that [base, base + size) is a segment of device dev's shard. */
void shim_owner_set(uintptr_t base, size_t size, int dev, int shard);

/* Forgets the hints of [base, base + size), a range dev's shard gave back. */
void shim_owner_clear(uintptr_t base, size_t size, int dev, int shard);

/* 0, with the device and shard the hint for addr names; -ENOENT if none. */
int shim_owner_hint(uintptr_t addr, int *dev, int *shard);

#endif
