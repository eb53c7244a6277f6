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
 * A block in a VMM segment has no CUDA handle at all: its slot holds a
 * marker and the block's start instead, and the importer asks the
 * exporter (handoff.h) for the block's physical pieces as file
 * descriptors, which it maps one after another (vmm.h).
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
#include "handoff.h"
#include "ipc.h"
#include "log.h"
#include "real.h"
#include "vmm.h"

#define HANDLE_MAGIC "cupoolH\001"
#define VMM_MAGIC "cupoolV\001" /* a slot's handle: a block in a VMM segment */

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

/* ---- blocks in VMM segments ------------------------------------------------- */

/* The context of device dev made current on this thread, for the driver's
 * export calls (the handoff thread has none): the context to make current
 * again after, in *back. False if it cannot be. */
static bool enter_device(int dev, CUcontext *back)
{
    CUdevice d;
    CUcontext c;
    if (!shim_drv.cuCtxGetCurrent || shim_drv.cuCtxGetCurrent(back) != CUDA_SUCCESS ||
        shim_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
        shim_drv.cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS)
        return false;
    if (shim_drv.cuCtxSetCurrent(c) == CUDA_SUCCESS)
        return true;
    shim_drv.cuDevicePrimaryCtxRelease_v2(d);
    return false;
}

static void leave_device(int dev, CUcontext back)
{
    CUdevice d;
    shim_drv.cuCtxSetCurrent(back);
    if (shim_drv.cuDeviceGet(&d, dev) == CUDA_SUCCESS)
        shim_drv.cuDevicePrimaryCtxRelease_v2(d);
}

/* The exporter's answer (shim_handoff_fn): the pieces behind the block
 * exported at slot, if its nonce is still nonce. */
static int serve_vmm(uint32_t slot, uint64_t nonce, shim_vmm_piece **pieces, size_t *n,
                     uint64_t *skip)
{
    cudaIpcMemHandle_t h;
    uint64_t offset, size;
    int dev;
    int err = shim_ipc_exported(slot, nonce, h.reserved, &offset, &size, &dev);
    if (err)
        return err;
    if (memcmp(h.reserved, VMM_MAGIC, 8) || dev < 0 || dev >= SHIM_MAX_DEVICES ||
        !shim_devices[dev].vmm)
        return -EINVAL; /* a slot of another kind */
    uintptr_t start, live;
    size_t live_size;
    memcpy(&start, h.reserved + 8, sizeof(start));
    /* Freed since it was exported: its pieces may hold other blocks now. */
    if (shim_device_block_of(dev, start, &live, &live_size) || live != start ||
        live_size != size)
        return -ENOENT;
    CUcontext back;
    if (!enter_device(dev, &back))
        return -EIO;
    size_t first;
    err = shim_vmm_export(shim_devices[dev].vmm, start, size, pieces, n, &first);
    leave_device(dev, back);
    *skip = first + offset;
    return err;
}

/* The slot's contents for the block holding ptr on device dev, in a VMM
 * segment: a marker and the block's start as its handle, ptr's offset in
 * the block, and the block's size; with the exporter listening for
 * importers. 0 or cudaErrorInvalidValue (logged). */
static int vmm_slot(int dev, uintptr_t ptr, cudaIpcMemHandle_t *h, uint64_t *offset,
                    size_t *size)
{
    uintptr_t start;
    int err = shim_device_block_of(dev, ptr, &start, size);
    if (!err)
        err = shim_handoff_serve(serve_vmm);
    if (err) {
        shim_log(SHIM_LOG_ERROR, "IPC handle for %#lx: %s; refused", (unsigned long)ptr,
                 err == -EALREADY ? "the block is free" : "this process cannot hand "
                 "out memory of VMM segments (see the line before)");
        return cudaErrorInvalidValue;
    }
    memset(h, 0, sizeof(*h));
    memcpy(h->reserved, VMM_MAGIC, 8);
    memcpy(h->reserved + 8, &start, sizeof(start));
    *offset = ptr - start;
    return 0;
}

int shim_ipc_get(const shim_ipc_api *api, void *h, void *ptr)
{
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        uintptr_t base;
        size_t size;
        if (!shim_device_shard_if_any(i, 0) ||
            shim_device_segment_of(i, (uintptr_t)ptr, &base, &size) == -ENOENT)
            continue;
        cudaIpcMemHandle_t seg;
        cupool_handle c = {.pid = (int32_t)getpid(), .offset = (uintptr_t)ptr - base};
        memcpy(c.magic, HANDLE_MAGIC, sizeof(c.magic));
        int err;
        if (shim_devices[i].vmm) {
            if ((err = vmm_slot(i, (uintptr_t)ptr, &seg, &c.offset, &size)) != 0)
                return err;
        } else if (base == (uintptr_t)ptr) {
            return real_get(api, h, ptr);
        } else if ((err = real_get(api, &seg, (void *)base)) != 0) {
            return err;
        }
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

/* A segment mapped from another process, by its CUDA handle; or a block
 * of another process's VMM segment, by cupool's handle, with the pieces
 * mapped for it. */
typedef struct mapped {
    cudaIpcMemHandle_t h;
    uintptr_t base;
    size_t users;
    shim_vmm_piece *pieces; /* a VMM block's (descriptors closed); else NULL */
    size_t npieces;
    uintptr_t block;        /* a VMM block's address in the mapping */
} mapped;
/* A pointer handed out, and the segment it is in. */
typedef struct opened { uintptr_t ptr; size_t seg; } opened;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static mapped *segs;
static size_t nsegs, segs_cap;
static opened *ptrs;
static size_t nptrs, ptrs_cap;

/* Maps a VMM block from exporter c (its pieces, fetched) for the current
 * device (api's context made current as api would): cudaSuccess with
 * the mapping in *m and the block's address in *at, or an error (logged). */
static int map_vmm(const shim_ipc_api *api, const cupool_handle *c, mapped *m,
                   uintptr_t *at)
{
    shim_vmm_piece *p;
    size_t n;
    uint64_t skip;
    int err = shim_handoff_fetch(c->pid, c->slot, c->nonce, &p, &n, &skip);
    CUdevice dev = -1;
    if (!err)
        api->ready();
    if (!err && (shim_drv_resolve() != 0 || !shim_drv.cuCtxGetDevice ||
                 shim_drv.cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0))
        err = -ENODEV;
    size_t span = 0;
    for (size_t k = 0; !err && k < n; k++)
        span += p[k].len;
    if (!err && skip >= span)
        err = -EPROTO;
    if (!err)
        err = shim_vmm_import(dev, p, n, &m->base);
    for (size_t k = 0; k < n; k++)
        close(p[k].fd);
    if (err) {
        free(p);
        shim_log(SHIM_LOG_ERROR, "opening an IPC handle: process %d's block in a VMM "
                 "segment: %s; nothing was mapped", (int)c->pid,
                 err == -ECONNREFUSED ? "that process does not answer (it ended?)"
                 : err == -EPERM ? "what answers in its name is not that process of "
                                   "this user; not asked"
                 : err == -ESTALE ? "the block was exported again or the handle is old"
                 : err == -ENOENT ? "the block is no longer there"
                 : err == -ENOTSUP ? "its memory cannot be exported (see its log)"
                 : strerror(-err));
        return err == -ENOMEM ? cudaErrorMemoryAllocation : cudaErrorInvalidValue;
    }
    m->pieces = p;
    m->npieces = n;
    m->block = *at = m->base + skip;
    return cudaSuccess;
}

/* Maps the segment of handle h once (later opens count a user):
 * cudaSuccess with its index in *seg and the address to hand out in *at,
 * or an error. A VMM block's key is cupool's handle c (h otherwise).
 * Needs lock. */
static int map_locked(const shim_ipc_api *api, const cudaIpcMemHandle_t *h,
                      const cupool_handle *vmm, uint64_t offset, unsigned int flags,
                      size_t *seg, uintptr_t *at)
{
    cudaIpcMemHandle_t key = *h;
    if (vmm) {
        memset(&key, 0, sizeof(key));
        memcpy(key.reserved, vmm, sizeof(*vmm));
    }
    for (size_t i = 0; i < nsegs; i++) {
        if (!memcmp(&segs[i].h, &key, sizeof(key))) {
            segs[i].users++;
            *seg = i;
            *at = segs[i].pieces ? segs[i].block : segs[i].base + offset;
            return cudaSuccess;
        }
    }
    if (!pool_grow((void **)&segs, &segs_cap, nsegs, sizeof(*segs)))
        return cudaErrorMemoryAllocation;
    mapped m = {.h = key, .users = 1};
    int e;
    if (vmm) {
        e = map_vmm(api, vmm, &m, at);
    } else {
        void *base = NULL;
        shim_inside++;
        e = api->open(&base, h, flags);
        shim_inside--;
        m.base = (uintptr_t)base;
        *at = m.base + offset;
    }
    if (e)
        return e;
    segs[nsegs] = m;
    *seg = nsegs++;
    return cudaSuccess;
}

int shim_ipc_open(const shim_ipc_api *api, void **ptr, const void *h, unsigned int flags)
{
    cupool_handle c;
    memcpy(&c, h, sizeof(c));
    uint64_t offset = 0;
    cudaIpcMemHandle_t seg_h;
    memcpy(&seg_h, h, sizeof(seg_h));
    bool vmm = false;
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
        vmm = !memcmp(seg_h.reserved, VMM_MAGIC, 8);
        if (vmm && c.pid == (int32_t)getpid()) {
            shim_log(SHIM_LOG_ERROR, "opening an IPC handle in the process that made "
                     "it: refused, as CUDA refuses");
            return cudaErrorDeviceUninitialized;
        }
    }
    if (!ptr)
        return cudaErrorInvalidValue;
    pthread_mutex_lock(&lock);
    size_t seg;
    uintptr_t at = 0;
    int e = pool_grow((void **)&ptrs, &ptrs_cap, nptrs, sizeof(*ptrs))
                ? map_locked(api, &seg_h, vmm ? &c : NULL, offset, flags, &seg, &at)
                : cudaErrorMemoryAllocation;
    if (!e) {
        ptrs[nptrs++] = (opened){at, seg};
        *ptr = (void *)at;
    }
    pthread_mutex_unlock(&lock);
    return e;
}

int shim_ipc_close(const shim_ipc_api *api, void *ptr)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nptrs; i++) {
        if (ptrs[i].ptr != (uintptr_t)ptr)
            continue;
        size_t seg = ptrs[i].seg;
        ptrs[i] = ptrs[--nptrs];
        int e = 0;
        if (--segs[seg].users == 0) {
            mapped *m = &segs[seg];
            shim_inside++;
            if (m->pieces)
                shim_vmm_unimport(m->base, m->pieces, m->npieces);
            else
                e = api->close((void *)m->base);
            shim_inside--;
            free(m->pieces);
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
    int e = api->close(ptr);
    shim_inside--;
    return e;
}
