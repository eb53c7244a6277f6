/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ipc.c - see ipc.h: CUDA IPC of pooled blocks.
 *
 * A block that starts a cudaMalloc'd segment is exported with CUDA's own
 * handle (an importer maps the segment's base, which is the block):
 * importers without cupool work. Any other block would map at the wrong
 * address that way, so its handle is cupool's: a marker, the exporter's
 * pid, a slot on its live page and a nonce. The slot holds the segment's
 * CUDA handle and the block's offset (stats_page_export), read by the
 * importer's cupool under the page's ownership checks. The importer maps
 * each segment once, counts its users, and hands out base + offset; the
 * last close unmaps it.
 *
 * A block in a VMM segment has no CUDA handle at all: ipc_vmm.h.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "control.h"
#include "device.h"
#include "driver.h"
#include "grow.h"
#include "ipc.h"
#include "ipc_vmm.h"
#include "log.h"
#include "real.h"

#define HANDLE_MAGIC "cupoolH\001"

typedef struct cupool_handle {
    char magic[8];
    int32_t pid;
    uint32_t slot;
    uint64_t nonce;
    uint64_t offset; /* also on the page; here for whoever reads a dump */
} cupool_handle;

_Static_assert(sizeof(cupool_handle) <= sizeof(cudaIpcMemHandle_t),
               "cupool's handle fits in CUDA's");

/* The real calls, through the runtime or the driver (their handles are
 * the same 64 bytes, and their codes agree on 0, 1 invalid value and 2 out
 * of memory, the only ones cupool makes up). */
static int rt_get(void *h, void *ptr)
{
    return (int)shim_real.cudaIpcGetMemHandle(h, ptr);
}
static int rt_open(void **ptr, const void *h, unsigned int flags)
{
    cudaIpcMemHandle_t c;
    memcpy(&c, h, sizeof(c));
    return (int)shim_real.cudaIpcOpenMemHandle(ptr, c, flags);
}
static int rt_close(void *ptr) { return (int)shim_real.cudaIpcCloseMemHandle(ptr); }
static int drv_get(void *h, void *ptr)
{
    return (int)shim_drv.cuIpcGetMemHandle(h, (CUdeviceptr)ptr);
}
static int drv_open(void **ptr, const void *h, unsigned int flags)
{
    CUipcMemHandle c;
    CUdeviceptr p = 0;
    memcpy(&c, h, sizeof(c));
    int e = (int)shim_drv.cuIpcOpenMemHandle_v2(&p, c, flags);
    *ptr = (void *)p;
    return e;
}
static int drv_close(void *ptr) { return (int)shim_drv.cuIpcCloseMemHandle((CUdeviceptr)ptr); }
/* The runtime makes its device's primary context current at its first
 * call; the driver API wants the program's context current already. */
static void rt_ready(void)
{
    shim_real_resolve();
    if (!shim_real.cudaFree)
        return;
    shim_inside++;
    shim_real.cudaFree(NULL);
    shim_inside--;
}
static void drv_ready(void) {}

const shim_ipc_api shim_ipc_runtime = {rt_get, rt_open, rt_close, rt_ready};
const shim_ipc_api shim_ipc_driver = {drv_get, drv_open, drv_close, drv_ready};

static int real_get(const shim_ipc_api *api, void *h, void *ptr)
{
    shim_inside++;
    int e = api->get(h, ptr);
    shim_inside--;
    return e;
}

int shim_ipc_get(const shim_ipc_api *api, void *h, void *ptr)
{
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        uintptr_t base;
        size_t size;
        if (!shim_device_shard_if_any(i, 0) ||
            shim_device_segment_of(i, (uintptr_t)ptr, &base, &size) == -ENOENT)
            continue;
        if (shim_device_vmm(i))
            return shim_ipc_vmm_get(i, (uintptr_t)ptr, h);
        if (base == (uintptr_t)ptr)
            return real_get(api, h, ptr);
        cudaIpcMemHandle_t seg;
        int err = real_get(api, &seg, (void *)base);
        if (err)
            return err;
        cupool_handle c = {.pid = (int32_t)getpid(), .offset = (uintptr_t)ptr - base};
        memcpy(c.magic, HANDLE_MAGIC, sizeof(c.magic));
        err = shim_ipc_export(seg.reserved, c.offset, size, i, &c.slot, &c.nonce);
        if (err) {
            shim_log(SHIM_LOG_ERROR, "IPC handle for %p: the block shares a pooled "
                     "segment, and its export needs the live page, which this "
                     "process has not (%s); refused", ptr, strerror(-err));
            return cudaErrorInvalidValue;
        }
        memset(h, 0, sizeof(cudaIpcMemHandle_t));
        memcpy(h, &c, sizeof(c));
        return 0;
    }
    return real_get(api, h, ptr);
}

/* ---- the importer ----------------------------------------------------------- */

/* A segment mapped from another process, by its CUDA handle. */
typedef struct mapped { cudaIpcMemHandle_t h; uintptr_t base; size_t users; } mapped;
/* A pointer handed out, and the segment it is in. */
typedef struct opened { uintptr_t ptr; size_t seg; } opened;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static mapped *segs;
static size_t nsegs, segs_cap;
static opened *ptrs;
static size_t nptrs, ptrs_cap;

/* Maps the segment of CUDA handle h once (later opens count a user):
 * cudaSuccess and its index in *seg, or CUDA's error. Needs lock. */
static int map_locked(const shim_ipc_api *api, const cudaIpcMemHandle_t *h,
                      unsigned int flags, size_t *seg)
{
    for (size_t i = 0; i < nsegs; i++) {
        if (!memcmp(&segs[i].h, h, sizeof(*h))) {
            segs[i].users++;
            *seg = i;
            return cudaSuccess;
        }
    }
    if (!pool_grow((void **)&segs, &segs_cap, nsegs, sizeof(*segs)))
        return cudaErrorMemoryAllocation;
    void *base = NULL;
    shim_inside++;
    int e = api->open(&base, h, flags);
    shim_inside--;
    if (e)
        return e;
    segs[nsegs] = (mapped){*h, (uintptr_t)base, 1};
    *seg = nsegs++;
    return cudaSuccess;
}

int shim_ipc_open(const shim_ipc_api *api, void **ptr, const void *h, unsigned int flags)
{
    if (shim_ipc_vmm_handle(h))
        return shim_ipc_vmm_open(h, api->ready, ptr);
    cupool_handle c;
    memcpy(&c, h, sizeof(c));
    uint64_t offset = 0;
    cudaIpcMemHandle_t seg_h;
    memcpy(&seg_h, h, sizeof(seg_h));
    if (!memcmp(c.magic, HANDLE_MAGIC, sizeof(c.magic))) {
        uint64_t size;
        int32_t dev;
        int err = stats_page_import(c.pid, c.slot, c.nonce, seg_h.reserved, &offset, &size,
                                    &dev);
        if (err) {
            shim_log(SHIM_LOG_ERROR, "opening an IPC handle: a cupool handle from process "
                     "%d that cannot be opened here (%s): %s; nothing was mapped",
                     (int)c.pid, strerror(-err),
                     err == -ESTALE ? "the block was exported again or the handle is old"
                     : err == -ENOENT || err == -ESRCH ? "that process has no live page"
                     : "its page is not one this user may read (cupool handles work "
                       "between processes of one user, in one pid namespace)");
            return cudaErrorInvalidValue;
        }
    }
    if (!ptr)
        return cudaErrorInvalidValue;
    pthread_mutex_lock(&lock);
    size_t seg;
    int e = pool_grow((void **)&ptrs, &ptrs_cap, nptrs, sizeof(*ptrs))
                ? map_locked(api, &seg_h, flags, &seg) : cudaErrorMemoryAllocation;
    if (!e) {
        ptrs[nptrs++] = (opened){segs[seg].base + offset, seg};
        *ptr = (void *)(segs[seg].base + offset);
    }
    pthread_mutex_unlock(&lock);
    return e;
}

int shim_ipc_close(const shim_ipc_api *api, void *ptr)
{
    int e;
    if (shim_ipc_vmm_close(ptr, &e))
        return e;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nptrs; i++) {
        if (ptrs[i].ptr != (uintptr_t)ptr)
            continue;
        size_t seg = ptrs[i].seg;
        ptrs[i] = ptrs[--nptrs];
        e = 0;
        if (--segs[seg].users == 0) {
            shim_inside++;
            e = api->close((void *)segs[seg].base);
            shim_inside--;
            /* The last segment moves into seg: repoint its pointers. */
            segs[seg] = segs[--nsegs];
            for (size_t k = 0; k < nptrs; k++)
                if (ptrs[k].seg == nsegs)
                    ptrs[k].seg = seg;
        }
        pthread_mutex_unlock(&lock);
        return e;
    }
    pthread_mutex_unlock(&lock);
    shim_inside++;
    e = api->close(ptr);
    shim_inside--;
    return e;
}
