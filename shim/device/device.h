/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.h - one pool per device (in shards) and the CUDA backend that
 * feeds it: serving, freeing, flushing, statistics. The device's state is
 * devstate.h's; its fence is fence.h's.
 */
#ifndef CUPOOL_SHIM_DEVICE_H
#define CUPOOL_SHIM_DEVICE_H

#include <stdbool.h>

#include "config.h"
#include "process.h"
#include "pool.h"

#include "devstate.h"

/* Shard s of the device's pools, created on first use (with the device
 * current); NULL if it cannot be created (the caller passes through). */
pool *shim_device_shard(int dev, int s);

/* Allocates size bytes from the pool that serves the calling thread (its
 * shard, or shard 0 for a large request). 0, -ENODEV (no pool: the caller
 * passes the call on) or pool_alloc's error (on -EDQUOT or -ENOMEM, see
 * shim_cap_reclaim). */
int shim_device_alloc(int dev, size_t size, uintptr_t *addr);

/* Frees addr in whichever shard of whichever device owns it: the one the
 * owner hint names first, then device guess's (-1: none; the calling
 * thread's shard first), then the other devices'. 0, or pool_free's error
 * (-ENOENT: no pool owns it). */
int shim_device_free(int guess, uintptr_t addr);

/* True if ptr lies inside a segment of any device's pool (a free of it is
 * the pool's). */
bool shim_device_owns(void *ptr);

/* pool_segment_of over the device's shards. */
int shim_device_segment_of(int dev, uintptr_t addr, uintptr_t *base, size_t *size);

/* pool_block_of over the device's shards. */
int shim_device_block_of(int dev, uintptr_t addr, pool_span *block, uint64_t *born);

/* The program enabled peer access: device peer may now reach device
 * owner's memory. Owner's VMM segments (CUPOOL_VMM, CUPOOL_STITCH) grant
 * peer access, those mapped already and those to come (cudaMalloc'd ones
 * need nothing: the driver's enabling covers them). */
void shim_device_peer_access(int owner, int peer);

/* Empties the device's pools without releasing anything (after
 * cudaDeviceReset: the reset freed it all). */
void shim_device_abandon(int dev);

/* Releases every device's fully free segments; returns bytes released.
 * Sets each device current on the calling thread while it works. */
uint64_t shim_device_flush_all(void);

#endif
