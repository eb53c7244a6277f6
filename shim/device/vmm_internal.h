/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vmm_internal.h - what vmm.c (segments) and vmm_park.c (their memory
 * moved away and back) share: the segments' records, and the helpers both
 * call. Nothing else includes it (and it does not include vmm.h, which
 * names struct shim_vmm as shim_vmm).
 */
#ifndef CUPOOL_SHIM_VMM_INTERNAL_H
#define CUPOOL_SHIM_VMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "driver.h"
#include "pool.h"

/* The driver's own functions (shim_drv): cupool's VMM segments are the
 * pool's, never counted as memory passed through. */
#define drv shim_drv

typedef struct gran {
    CUmemGenericAllocationHandle h; /* the piece's; 0 = given back */
    size_t len;                     /* at a piece's first granule, its
                                       granules; 0 at the others */
} gran;

typedef struct vmm_range {
    uintptr_t base;
    size_t size;
    size_t mapped; /* granules still mapped */
    gran *g;       /* one per granule */
    bool borrowed; /* stitched: the pieces are others' */
    bool parked;   /* its memory is away (vmm_park.c): each piece's first
                      granule keeps its length, its h only marks it (a
                      stitched range's: the address of its part) */
} vmm_range;

struct shim_vmm {
    int dev;
    size_t gran; /* the driver's granularity */
    size_t unit; /* a whole piece: a power-of-two multiple of gran */
    CUmemAllocationProp prop; /* its requestedHandleTypes: see exportable */
    atomic_bool exportable;   /* pieces are made exportable as POSIX fds */
    pthread_mutex_t lock;
    uint64_t granted; /* devices every mapping grants access (a bit each) */
    vmm_range *r; /* sorted by base */
    size_t n, cap;
    pool_span *later; /* shim_vmm_defer */
    size_t nlater, later_cap;
};

/* The driver's words for e. */
const char *vmm_errstr(CUresult e);
/* Index of the range holding addr, or -1. Needs v->lock. */
long vmm_find(const struct shim_vmm *v, uintptr_t addr);
/* A physical allocation of len bytes on v's device (vmm.c says how). */
CUresult vmm_create(struct shim_vmm *v, size_t len, CUmemGenericAllocationHandle *h);
/* The devices a mapping made now must grant access: v's and its peers. */
uint64_t vmm_access_due(const struct shim_vmm *v);
/* Grants the devices in mask read and write access to [addr, addr + size). */
CUresult vmm_set_access(uintptr_t addr, size_t size, uint64_t mask);
/* Grants mask to every mapped run of granules of r. Needs v->lock. */
CUresult vmm_grant_range(const struct shim_vmm *v, const vmm_range *r, uint64_t mask);

#endif
