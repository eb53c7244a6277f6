/*
 * vmm.h - segments made with the driver's virtual memory calls
 * (CUPOOL_VMM=1), so that the pool can give back the memory under a free
 * block inside a segment (pool_backend.trim) while the rest stays.
 *
 * A segment is a range of reserved addresses backed granule by granule
 * (2 MiB on current GPUs): one physical allocation per granule, each mapped
 * and made readable and writable by the device. cudaMalloc'd memory can
 * only be freed whole; this can be unmapped a granule at a time.
 *
 * The caller makes sure no GPU work can still touch what it unmaps (the
 * driver does not wait: measured on an H200, cuMemUnmap returned in 48 us
 * during a 1 s kernel).
 */
#ifndef CUPOOL_SHIM_VMM_H
#define CUPOOL_SHIM_VMM_H

#include <stddef.h>
#include <stdint.h>

#include "pool.h"

typedef struct shim_vmm shim_vmm;

/* Sets up VMM segments for runtime device dev (current on this thread).
 * Returns NULL, after logging why, where the runtime or the device cannot
 * (runtime older than 12.5, no driver support). */
shim_vmm *shim_vmm_open(int dev);

/* The granule: segment sizes and trims are multiples of it, and segment
 * bases are aligned to it. */
size_t shim_vmm_unit(const shim_vmm *v);

/* Reserves, backs and maps a segment of size bytes (a multiple of the
 * unit). Returns 0, -ENOMEM (the device is out of memory) or -EIO, with
 * nothing held. */
int shim_vmm_map(shim_vmm *v, size_t size, uintptr_t *base);

/* Maps the granules behind n parts (unit-aligned ranges of segments,
 * stitched ones included) one after another into a new range, and stores
 * its base in *base. The memory stays the parts' owners': unmapping the
 * new range frees none of it. Returns 0, -ENOMEM or -EIO, with nothing
 * held. */
int shim_vmm_stitch(shim_vmm *v, const pool_span *parts, size_t n,
                    uintptr_t *base);

/* Unmaps and frees the granules of [addr, addr + size), any unit-aligned
 * part of mapped segments (of a stitched range: unmaps only); a
 * reservation goes once none of it is mapped. */
void shim_vmm_unmap(shim_vmm *v, uintptr_t addr, size_t size);

/* Keeps [addr, addr + size) to unmap later, at the next shim_vmm_drain
 * (when the device cannot be synchronized now). Returns 0 or -ENOMEM. */
int shim_vmm_defer(shim_vmm *v, uintptr_t addr, size_t size);

/* Ranges shim_vmm_defer kept and not yet unmapped. */
size_t shim_vmm_deferred(shim_vmm *v);

/* Unmaps what shim_vmm_defer kept. The device must be synchronized. */
void shim_vmm_drain(shim_vmm *v);

#endif
