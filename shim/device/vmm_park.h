/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vmm_park.h - a device's VMM segments without their memory for a while
 * (cupool pause): every address stays reserved, only the physical memory
 * goes (cuMemUnmap, cuMemRelease), and comes back at the same addresses
 * (cuMemCreate, cuMemMap, cuMemSetAccess). The caller copies the bytes
 * out before and in after (process/park.c), and makes sure no work can
 * touch the segments meanwhile.
 *
 * While parked, a trim or an unmap of a parked range only forgets what it
 * gives back (its memory is gone already), and a stitch of its parts
 * fails: the pool makes a new segment instead. Segments mapped since stay
 * as they are.
 */
#ifndef CUPOOL_SHIM_VMM_PARK_H
#define CUPOOL_SHIM_VMM_PARK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool.h"
#include "vmm.h"

/* The pieces of v's own segments (stitched ranges map others' pieces and
 * are left out) that hold memory, or held it when parked, in address
 * order, runs of adjacent pieces of a segment joined into one span: up to
 * max into out. Returns how many there are (more than max: ask again with
 * room). */
size_t shim_vmm_spans(shim_vmm *v, pool_span *out, size_t max);

/* How far copies beside shim_vmm_park or shim_vmm_unpark have come. */
typedef struct shim_vmm_watch {
    /* Out (the caller copies, park waits): every own piece below this
     * address has its bytes copied; UINTPTR_MAX once every copy is done
     * and the caller lets the memory go. Back (unpark makes, the caller
     * waits): every own piece below it is backed with its access, its
     * bytes may be copied in; UINTPTR_MAX once the call succeeded. */
    _Atomic uintptr_t ready;
    /* Out: the copies failed (set by the caller). Back: the call failed,
     * set before it releases anything it made; ready moves no further. */
    atomic_bool failed;
    /* Back: called once failed is set and before that release: returns when no
     * copy into v's memory is in flight (NULL: none can be). */
    void (*drain)(void *arg);
    void *arg;
} shim_vmm_watch;

/* Unmaps each own piece of v's segments once w (NULL: none, every piece
 * at once) says its bytes are copied, and once w says all are: unmaps the
 * stitched ranges and releases the own pieces' physical memory, recording
 * what each piece was. 0 and *bytes the memory released; -ENOMEM (no host
 * memory for the bookkeeping) with nothing done; or -EIO where w failed,
 * every piece mapped again with its bytes, as before (-EFAULT: some could
 * not be, and were said; a use of them faults). A failed unmap or
 * release is logged and counted out of *bytes. */
int shim_vmm_park(shim_vmm *v, uint64_t *bytes, shim_vmm_watch *w);

/* Backs every parked piece with new physical memory at its address, with
 * the access v's mappings grant, and maps stitched ranges from their parts
 * again; w (NULL: none) is told as own pieces become ready, in address
 * order. 0; or -ENOMEM (the device is full) or -EIO, with every range
 * parked as before (what this call made is released). Their bytes are
 * undefined until the caller copies them in. */
int shim_vmm_unpark(shim_vmm *v, shim_vmm_watch *w);

/* Whether any range of v is parked. */
bool shim_vmm_parked(shim_vmm *v);

#endif
