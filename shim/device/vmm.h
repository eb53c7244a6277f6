/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vmm.h - segments made with the driver's virtual memory calls
 * (CUPOOL_VMM=1), so that the pool can give back the memory under a free
 * block inside a segment (pool_backend.trim) while the rest stays.
 *
 * A segment is a range of reserved addresses backed piece by piece: one
 * physical allocation per unit (CUPOOL_VMM_UNIT: by default the granule,
 * 2 MiB on current GPUs) and per granule for a tail shorter than a unit,
 * each mapped and made readable and writable by the device and by every
 * device the program enabled peer access to it from. cudaMalloc'd
 * memory can only be freed whole; this can be unmapped a unit at a time.
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

/* Sets up VMM segments for runtime device dev (current on this thread),
 * in pieces of unit bytes (0: the granule; one that is not a power-of-two
 * multiple of the granule is logged and replaced by it). Returns NULL,
 * after logging why, where the runtime or the device cannot (runtime
 * older than 12.5, no driver support). */
shim_vmm *shim_vmm_open(int dev, size_t unit);

/* The unit: trims and stitched parts are unit-aligned multiples of it,
 * and every unit-aligned unit inside a segment is one piece. */
size_t shim_vmm_unit(const shim_vmm *v);

/* The device's granularity: segment sizes are multiples of it. */
size_t shim_vmm_granule(const shim_vmm *v);

/* Device peer may now reach device owner's memory (the program enabled
 * peer access, vmm_peer_note): the mappings of owner's segments made from
 * now on grant it access too. */
void shim_vmm_peer_note(int owner, int peer);

/* Grants every device noted for v's device access to all of v's mappings
 * that lack it (after shim_vmm_peer_note, and once v is in use). Returns
 * 0 or -EIO (logged; the mappings keep the access they had). */
int shim_vmm_grant(shim_vmm *v);

/* Reserves, backs and maps a segment of size bytes (a multiple of the
 * granule). Returns 0, -ENOMEM (the device is out of memory) or -EIO, with
 * nothing held. */
int shim_vmm_map(shim_vmm *v, size_t size, uintptr_t *base);

/* Maps the pieces behind n parts (unit-aligned ranges of segments,
 * stitched ones included) one after another into a new range, and stores
 * its base in *base. The memory stays the parts' owners': unmapping the
 * new range frees none of it. Returns 0, -ENOMEM or -EIO, with nothing
 * held. */
int shim_vmm_stitch(shim_vmm *v, const pool_span *parts, size_t n,
                    uintptr_t *base);

/* Maps the pieces behind n parts (as shim_vmm_stitch) from base + size
 * on, where base is a range shim_vmm_stitch made (which keeps twice its
 * first size of addresses) and size what it maps so far. Returns 0,
 * -ENOSPC (no room), -ENOMEM or -EIO, with nothing more mapped. */
int shim_vmm_extend(shim_vmm *v, uintptr_t base, size_t size,
                    const pool_span *parts, size_t n);

/* Unmaps and frees the pieces of [addr, addr + size), any unit-aligned
 * part of mapped segments (of a stitched range: unmaps only); a
 * reservation goes once none of it is mapped. */
void shim_vmm_unmap(shim_vmm *v, uintptr_t addr, size_t size);

/* ---- sharing with other processes (CUDA IPC of VMM memory) ---- */

/* A piece exported: a POSIX file descriptor for it and its length. */
typedef struct shim_vmm_piece { int fd; size_t len; } shim_vmm_piece;

/* The pieces behind [addr, addr + size) of v's segments, in address
 * order: *n of them, *skip (addr's offset in the first) and *span (their
 * bytes). Returns 0, or -ENOENT where part of the range is not mapped in
 * v. */
int shim_vmm_layout(shim_vmm *v, uintptr_t addr, size_t size, size_t *n, size_t *skip,
                    size_t *span);

/* Exports those pieces from the k-th on, at most max, into p as POSIX file
 * descriptors (the caller closes them): *got of them, fewer than max only
 * at the end. Returns 0; -ENOENT; -ENOTSUP where the driver cannot export
 * v's pieces (they are made exportable when the device supports POSIX
 * file descriptors); -EIO; with nothing held on failure. */
int shim_vmm_export(shim_vmm *v, uintptr_t addr, size_t size, size_t k,
                    shim_vmm_piece *p, size_t max, size_t *got);

/* Importing pieces another process exported, one after another: the
 * addresses for span bytes (begin), each piece mapped at its offset (its
 * descriptor stays the caller's), then read and write access for device
 * dev to all of it (end). Each returns 0, -EINVAL (a descriptor the driver
 * refuses), -ENOMEM or -EIO; on failure the caller unimports what it
 * mapped. */
int shim_vmm_import_begin(size_t span, uintptr_t *base);
int shim_vmm_import_piece(uintptr_t base, size_t off, const shim_vmm_piece *p);
int shim_vmm_import_end(int dev, uintptr_t base, size_t span);

/* Unmaps the n pieces of lengths lens mapped one after another from base
 * and frees the span addresses. The caller makes sure no work still uses
 * them (the driver does not wait). */
void shim_vmm_unimport(uintptr_t base, size_t span, const size_t *lens, size_t n);

/* Keeps [addr, addr + size) to unmap later, at the next shim_vmm_drain
 * (when the device cannot be synchronized now). Returns 0 or -ENOMEM. */
int shim_vmm_defer(shim_vmm *v, uintptr_t addr, size_t size);

/* Ranges shim_vmm_defer kept and not yet unmapped. */
size_t shim_vmm_deferred(shim_vmm *v);

/* Unmaps what shim_vmm_defer kept. The device must be synchronized. */
void shim_vmm_drain(shim_vmm *v);

#endif
