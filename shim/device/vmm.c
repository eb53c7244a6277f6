/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vmm.c - see vmm.h.
 *
 * The driver calls are the loaded driver's own (driver.h), so the tests'
 * simulated driver can stand in.
 * A reservation is backed by pieces: physical allocations of one unit
 * (CUPOOL_VMM_UNIT, a power-of-two multiple of the granule) from its base,
 * which is aligned to the unit, and of one granule for the tail that is
 * shorter than a unit. So every unit-aligned unit inside a reservation is
 * one piece: the pool trims and stitches whole units, and each costs one
 * mapping (the driver charges per mapping, about 17 us for setting access
 * and 10 us for unmapping, whatever its size). Each reservation keeps one
 * entry per granule, in address order: a piece's first granule holds its
 * handle and length, the others its handle and length 0; handle 0 is a
 * granule given back. A stitched reservation maps pieces that other
 * reservations own: unmapping it releases none.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "config.h"
#include "log.h"
#include "driver.h"
#include "grow.h"
#include "vmm.h"
#include "vmm_internal.h"

/* The driver's own functions (shim_drv): cupool's VMM segments are the
 * pool's, never counted as memory passed through. */
static const char *drv_missing; /* the first call not found, or NULL */
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_resolve(void)
{
    if (shim_drv_resolve() != 0) {
        drv_missing = "the driver (libcuda.so.1 is not loaded)";
        return;
    }
#define X_CHECK(name)                                                         \
    if (!drv_missing && !drv.name)                                            \
        drv_missing = #name;
    X_CHECK(cuDeviceGet) X_CHECK(cuDeviceGetAttribute)
    X_CHECK(cuMemGetAllocationGranularity) X_CHECK(cuMemAddressReserve)
    X_CHECK(cuMemAddressFree) X_CHECK(cuMemCreate) X_CHECK(cuMemRelease)
    X_CHECK(cuMemMap) X_CHECK(cuMemUnmap) X_CHECK(cuMemSetAccess)
    X_CHECK(cuGetErrorString)
#undef X_CHECK
}

const char *vmm_errstr(CUresult e)
{
    const char *s = NULL;
    if (drv.cuGetErrorString(e, &s) != CUDA_SUCCESS || !s)
        s = "unknown driver error";
    return s;
}

/* v's own device, as a bit. */
static uint64_t own_bit(const shim_vmm *v) { return 1ull << v->prop.location.id; }

shim_vmm *shim_vmm_open(int dev, size_t want_unit)
{
    pthread_once(&drv_once, drv_resolve);
    if (drv_missing) {
        shim_log(SHIM_LOG_ERROR, "CUPOOL_VMM: the driver call %s is not "
                 "available; using cudaMalloc'd segments", drv_missing);
        return NULL;
    }
    CUdevice cd;
    int ok = 0;
    size_t gsize = 0;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE}};
    CUresult e = drv.cuDeviceGet(&cd, dev);
    if (e == CUDA_SUCCESS)
        e = drv.cuDeviceGetAttribute(
            &ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cd);
    prop.location.id = cd;
    if (e == CUDA_SUCCESS && ok)
        e = drv.cuMemGetAllocationGranularity(&gsize, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (e != CUDA_SUCCESS || !ok || !gsize || (gsize & (gsize - 1))) {
        shim_log(SHIM_LOG_ERROR, "CUPOOL_VMM: device %d %s; using cudaMalloc'd "
                 "segments", dev, e != CUDA_SUCCESS ? vmm_errstr(e)
                 : !ok ? "does not support virtual memory management"
                 : "reports an unusable granularity");
        return NULL;
    }
    size_t unit = want_unit ? want_unit : gsize;
    if (unit < gsize || unit % gsize || (unit & (unit - 1))) {
        shim_log(SHIM_LOG_ERROR, "CUPOOL_VMM_UNIT=%zu: not a power-of-two "
                 "multiple of device %d's granularity (%zu bytes); using "
                 "the granularity", unit, dev, gsize);
        unit = gsize;
    }
    shim_vmm *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    v->dev = dev;
    v->gran = gsize;
    v->unit = unit;
    v->prop = prop;
    int fds = 0;
    atomic_init(&v->exportable,
                drv.cuDeviceGetAttribute(
                    &fds, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                    cd) == CUDA_SUCCESS && fds);
    v->granted = own_bit(v);
    pthread_mutex_init(&v->lock, NULL);
    return v;
}

/* ---- access: the device itself, and the peers the program enabled ---------- */

/* Per device, the devices (a bit each) the program enabled peer access to
 * its memory from. */
static _Atomic uint64_t peers_of[SHIM_MAX_DEVICES];

void shim_vmm_peer_note(int owner, int peer)
{
    if (owner >= 0 && owner < SHIM_MAX_DEVICES && peer >= 0 && peer < SHIM_MAX_DEVICES)
        atomic_fetch_or(&peers_of[owner], 1ull << peer);
}

/* The devices a mapping made now must grant access: v's and its peers. */
uint64_t vmm_access_due(const shim_vmm *v)
{
    return own_bit(v) | atomic_load(&peers_of[v->dev]);
}

/* Grants the devices in mask read and write access to [addr, addr + size). */
CUresult vmm_set_access(uintptr_t addr, size_t size, uint64_t mask)
{
    CUmemAccessDesc d[SHIM_MAX_DEVICES];
    size_t n = 0;
    for (int i = 0; i < SHIM_MAX_DEVICES; i++)
        if (mask >> i & 1)
            d[n++] = (CUmemAccessDesc){
                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = i},
                .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return drv.cuMemSetAccess(addr, size, d, n);
}

/* Sets access to a new mapping: v's device and every peer due. If the
 * peers cannot be granted, v's device alone (said once; the program's
 * copies from a peer may then fail, as they would without cupool's
 * grant). Needs v->lock. */
static CUresult set_new_access(shim_vmm *v, uintptr_t addr, size_t size)
{
    uint64_t own = own_bit(v), due = vmm_access_due(v) | v->granted;
    CUresult e = vmm_set_access(addr, size, due);
    if (e != CUDA_SUCCESS && due != own &&
        (e = vmm_set_access(addr, size, own)) == CUDA_SUCCESS) {
        static atomic_bool said;
        if (!atomic_exchange(&said, true))
            shim_log(SHIM_LOG_ERROR, "device %d: a new segment could not grant its "
                     "peers access; mapped for the device alone", v->dev);
    }
    return e;
}

/* Grants mask to every mapped run of granules of r. Needs v->lock. */
CUresult vmm_grant_range(const shim_vmm *v, const vmm_range *r, uint64_t mask)
{
    CUresult e = CUDA_SUCCESS;
    size_t n = r->size / v->gran;
    for (size_t i = 0; e == CUDA_SUCCESS && i < n;) {
        size_t j = i;
        while (j < n && r->g[j].h)
            j++;
        if (j > i)
            e = vmm_set_access(r->base + i * v->gran, (j - i) * v->gran, mask);
        i = j + 1;
    }
    return e;
}

int shim_vmm_grant(shim_vmm *v)
{
    pthread_mutex_lock(&v->lock);
    uint64_t more = vmm_access_due(v) & ~v->granted;
    CUresult e = CUDA_SUCCESS;
    for (size_t k = 0; more && e == CUDA_SUCCESS && k < v->n; k++)
        e = vmm_grant_range(v, &v->r[k], more);
    if (e == CUDA_SUCCESS)
        v->granted |= more;
    pthread_mutex_unlock(&v->lock);
    if (e != CUDA_SUCCESS)
        shim_log(SHIM_LOG_ERROR, "device %d: granting peers access to its "
                 "segments failed: %s; a peer's copies from them may fail",
                 v->dev, vmm_errstr(e));
    return e == CUDA_SUCCESS ? 0 : -EIO;
}

size_t shim_vmm_unit(const shim_vmm *v) { return v->unit; }

size_t shim_vmm_granule(const shim_vmm *v) { return v->gran; }

static pool_span range_at(const void *v, size_t i)
{
    const vmm_range *r = &((const shim_vmm *)v)->r[i];
    return (pool_span){r->base, r->size};
}

/* Index of the range holding addr, or -1. Needs v->lock. */
long vmm_find(const shim_vmm *v, uintptr_t addr)
{
    return pool_span_find(v, v->n, range_at, addr);
}

/* Records piece h of len granules at granule i of range r. */
static void piece_put(vmm_range *r, size_t i, CUmemGenericAllocationHandle h,
                      size_t len)
{
    for (size_t k = 0; k < len; k++)
        r->g[i + k] = (gran){h, k ? 0 : len};
    r->mapped += len;
}

/* Unmaps (and, unless borrowed, releases) the pieces of granules
 * [from, to) of range r. Both ends must be piece boundaries: a piece is
 * mapped and given back whole. False (nothing done) if they are not. */
static bool drop(shim_vmm *v, vmm_range *r, size_t from, size_t to)
{
    size_t n = r->size / v->gran;
    if ((from < n && r->g[from].h && !r->g[from].len) ||
        (to < n && r->g[to].h && !r->g[to].len))
        return false;
    for (size_t i = from; i < to;) {
        size_t len = r->g[i].h ? r->g[i].len : 1;
        if (!r->g[i].h) {
            i++;
            continue;
        }
        /* A parked range's memory is gone already: only its record goes. */
        CUresult e = r->parked ? CUDA_SUCCESS
                     : drv.cuMemUnmap(r->base + i * v->gran, len * v->gran);
        if (e == CUDA_SUCCESS && !r->borrowed && !r->parked)
            e = drv.cuMemRelease(r->g[i].h);
        if (e != CUDA_SUCCESS)
            shim_log(SHIM_LOG_WARN, "device %d: giving back %zu bytes at %#lx "
                     "failed: %s", v->dev, len * v->gran,
                     (unsigned long)(r->base + i * v->gran), vmm_errstr(e));
        for (size_t k = 0; k < len; k++)
            r->g[i + k] = (gran){0, 0};
        r->mapped -= len;
        i += len;
    }
    return true;
}

/* Inserts r into v->r, sorted by base. Needs v->lock. False: no memory. */
static bool insert_locked(shim_vmm *v, const vmm_range *r)
{
    if (!pool_grow((void **)&v->r, &v->cap, v->n, sizeof(*v->r)))
        return false;
    size_t i = v->n;
    while (i > 0 && v->r[i - 1].base > r->base) {
        v->r[i] = v->r[i - 1];
        i--;
    }
    v->r[i] = *r;
    v->n++;
    return true;
}

/* Reserves addresses for size bytes, aligned to the unit if a whole unit
 * fits (so that its unit-aligned units are pieces), with one entry per
 * granule. */
static CUresult range_reserve(shim_vmm *v, size_t size, bool borrowed,
                              vmm_range *r)
{
    *r = (vmm_range){.size = size, .borrowed = borrowed,
                     .g = size / v->gran > SIZE_MAX / sizeof(*r->g) ? NULL
                          : calloc(size / v->gran, sizeof(*r->g))};
    if (!r->g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUdeviceptr va = 0;
    CUresult e = drv.cuMemAddressReserve(&va, size,
                                         size >= v->unit ? v->unit : v->gran, 0, 0);
    r->base = (uintptr_t)va;
    return e;
}

/* Gives back what range_reserve and a failed mapping left: nothing of it
 * was used yet, so there is no need to wait for the device. */
static void range_undo(shim_vmm *v, vmm_range *r)
{
    if (r->g) /* NULL: no host memory for the entries, nothing mapped */
        drop(v, r, 0, r->size / v->gran);
    if (r->base)
        drv.cuMemAddressFree(r->base, r->size);
    free(r->g);
}

/* A physical allocation of len bytes on v's device, exportable (for
 * CUDA IPC) while the driver accepts that; where it refuses, never again
 * asked (said once). */
CUresult vmm_create(shim_vmm *v, size_t len, CUmemGenericAllocationHandle *h)
{
    CUmemAllocationProp prop = v->prop;
    bool fds = atomic_load_explicit(&v->exportable, memory_order_relaxed);
    prop.requestedHandleTypes = fds ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                                    : CU_MEM_HANDLE_TYPE_NONE;
    CUresult e = drv.cuMemCreate(h, len, &prop, 0);
    if (fds && (e == CUDA_ERROR_NOT_SUPPORTED || e == CUDA_ERROR_INVALID_VALUE)) {
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
        e = drv.cuMemCreate(h, len, &prop, 0);
        if (e == CUDA_SUCCESS && atomic_exchange(&v->exportable, false))
            shim_log(SHIM_LOG_INFO, "device %d: the driver refuses exportable "
                     "physical memory; blocks in VMM segments cannot be shared "
                     "with other processes (CUDA IPC)", v->dev);
    }
    return e;
}

int shim_vmm_map(shim_vmm *v, size_t size, uintptr_t *base)
{
    if (!size || size % v->gran)
        return -EIO;
    vmm_range r;
    CUresult e = range_reserve(v, size, false, &r);
    for (size_t off = 0; e == CUDA_SUCCESS && off < size;) {
        size_t len = size - off >= v->unit ? v->unit : v->gran;
        CUmemGenericAllocationHandle h = 0;
        e = vmm_create(v, len, &h);
        if (e != CUDA_SUCCESS)
            break;
        e = drv.cuMemMap(r.base + off, len, 0, h, 0);
        if (e != CUDA_SUCCESS) {
            drv.cuMemRelease(h);
            break;
        }
        piece_put(&r, off / v->gran, h, len / v->gran);
        off += len;
    }
    pthread_mutex_lock(&v->lock);
    if (e == CUDA_SUCCESS)
        e = set_new_access(v, r.base, size);
    if (e == CUDA_SUCCESS && !insert_locked(v, &r))
        e = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&v->lock);
    if (e == CUDA_SUCCESS) {
        *base = r.base;
        return 0;
    }
    range_undo(v, &r);
    if (e != CUDA_ERROR_OUT_OF_MEMORY)
        shim_log(SHIM_LOG_ERROR, "device %d: mapping a %zu-byte segment "
                 "failed: %s", v->dev, size, vmm_errstr(e));
    return e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* Bytes of n parts, or 0 if one is not whole units. */
static size_t parts_size(const shim_vmm *v, const pool_span *parts, size_t n)
{
    size_t size = 0;
    for (size_t k = 0; k < n; k++) {
        if (!parts[k].size || parts[k].size % v->unit || parts[k].addr % v->unit)
            return 0;
        size += parts[k].size;
    }
    return size;
}

/* Maps the pieces behind the n parts one after another into range r from
 * byte off on, then sets access to them. Needs v->lock (r may be in
 * v->r). On failure what this call mapped is unmapped again (nothing used
 * it yet). */
static CUresult map_parts(shim_vmm *v, vmm_range *r, size_t off,
                          const pool_span *parts, size_t n)
{
    CUresult e = CUDA_SUCCESS;
    size_t at = off;
    for (size_t k = 0; e == CUDA_SUCCESS && k < n; k++) {
        for (uintptr_t a = parts[k].addr; a < parts[k].addr + parts[k].size;) {
            long i = vmm_find(v, a);
            const gran *src = i < 0 || v->r[i].parked ? NULL /* its memory is away */
                              : &v->r[i].g[(a - v->r[i].base) / v->gran];
            size_t len = src && src->h ? src->len * v->gran : 0;
            /* Only whole pieces, all inside the part. */
            e = len && len <= parts[k].addr + parts[k].size - a
                    ? drv.cuMemMap(r->base + at, len, 0, src->h, 0)
                    : CUDA_ERROR_INVALID_VALUE;
            if (e != CUDA_SUCCESS)
                break;
            piece_put(r, at / v->gran, src->h, len / v->gran);
            at += len;
            a += len;
        }
    }
    if (e == CUDA_SUCCESS)
        e = set_new_access(v, r->base + off, at - off);
    if (e != CUDA_SUCCESS)
        drop(v, r, off / v->gran, at / v->gran);
    return e;
}

int shim_vmm_stitch(shim_vmm *v, const pool_span *parts, size_t n,
                    uintptr_t *base)
{
    size_t size = parts_size(v, parts, n);
    if (!size || size > SIZE_MAX / 2)
        return -EIO;
    /* Twice the addresses, for shim_vmm_extend. */
    vmm_range r;
    CUresult e = range_reserve(v, 2 * size, true, &r);
    pthread_mutex_lock(&v->lock);
    if (e == CUDA_SUCCESS)
        e = map_parts(v, &r, 0, parts, n);
    if (e == CUDA_SUCCESS && !insert_locked(v, &r))
        e = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&v->lock);
    if (e == CUDA_SUCCESS) {
        *base = r.base;
        return 0;
    }
    range_undo(v, &r); /* unmaps what map_parts mapped */
    if (e != CUDA_ERROR_OUT_OF_MEMORY)
        shim_log(SHIM_LOG_ERROR, "device %d: stitching %zu bytes from %zu "
                 "parts failed: %s", v->dev, size, n, vmm_errstr(e));
    return e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

int shim_vmm_extend(shim_vmm *v, uintptr_t base, size_t size,
                    const pool_span *parts, size_t n)
{
    size_t more = parts_size(v, parts, n);
    if (!more || size % v->unit)
        return -EIO;
    pthread_mutex_lock(&v->lock);
    long i = vmm_find(v, base);
    vmm_range *r = i < 0 ? NULL : &v->r[i];
    int err = !r || r->base != base || !r->borrowed ? -EIO
              : more > r->size - size ? -ENOSPC : 0;
    CUresult e = CUDA_SUCCESS;
    if (!err && (e = map_parts(v, r, size, parts, n)) != CUDA_SUCCESS)
        err = e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
    pthread_mutex_unlock(&v->lock);
    if (err == -EIO && e != CUDA_SUCCESS)
        shim_log(SHIM_LOG_ERROR, "device %d: extending a stitched range by "
                 "%zu bytes failed: %s", v->dev, more, vmm_errstr(e));
    return err;
}

/* ---- sharing with other processes ------------------------------------------ */

/* The range holding [addr, addr + size) and the index of the first
 * granule of the piece holding addr: 0 or -ENOENT. Needs v->lock. */
static int first_piece(const shim_vmm *v, uintptr_t addr, size_t size,
                       const vmm_range **out, size_t *first)
{
    long k = vmm_find(v, addr);
    const vmm_range *r = k < 0 ? NULL : &v->r[k];
    if (!r || !size || size > r->base + r->size - addr)
        return -ENOENT;
    size_t i = (addr - r->base) / v->gran;
    while (i > 0 && r->g[i].h && !r->g[i].len)
        i--; /* back to the piece's first granule */
    *out = r;
    *first = i;
    return 0;
}

/* Steps from granule *i of r to the next piece of [.., end): false at
 * end, -ENOENT in *err at a granule given back. */
static bool next_piece(const shim_vmm *v, const vmm_range *r, uintptr_t end, size_t *i,
                       const gran **g, int *err)
{
    if (r->base + *i * v->gran >= end)
        return false;
    *g = &r->g[*i];
    if (!(*g)->h || !(*g)->len) {
        *err = -ENOENT; /* given back: a stale block */
        return false;
    }
    *i += (*g)->len;
    return true;
}

int shim_vmm_layout(shim_vmm *v, uintptr_t addr, size_t size, size_t *n, size_t *skip,
                    size_t *span)
{
    const vmm_range *r;
    const gran *g;
    size_t i;
    *n = *span = 0;
    pthread_mutex_lock(&v->lock);
    int err = first_piece(v, addr, size, &r, &i);
    if (!err)
        *skip = addr - (r->base + i * v->gran);
    while (!err && next_piece(v, r, addr + size, &i, &g, &err)) {
        (*n)++;
        *span += g->len * v->gran;
    }
    pthread_mutex_unlock(&v->lock);
    return err;
}

int shim_vmm_export(shim_vmm *v, uintptr_t addr, size_t size, size_t k,
                    shim_vmm_piece *p, size_t max, size_t *got)
{
    if (!drv.cuMemExportToShareableHandle)
        return -ENOTSUP;
    const vmm_range *r;
    const gran *g;
    size_t i, at = 0;
    *got = 0;
    pthread_mutex_lock(&v->lock);
    int err = first_piece(v, addr, size, &r, &i);
    while (!err && *got < max && next_piece(v, r, addr + size, &i, &g, &err)) {
        if (at++ < k)
            continue; /* before the first asked for */
        int fd = -1;
        CUresult e = drv.cuMemExportToShareableHandle(
            &fd, g->h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        if (e != CUDA_SUCCESS) {
            err = !atomic_load(&v->exportable) || e == CUDA_ERROR_NOT_SUPPORTED ||
                          e == CUDA_ERROR_INVALID_VALUE ? -ENOTSUP : -EIO;
            shim_log(SHIM_LOG_ERROR, "device %d: exporting a piece of the block at "
                     "%#lx failed: %s", v->dev, (unsigned long)addr, vmm_errstr(e));
            break;
        }
        p[(*got)++] = (shim_vmm_piece){fd, g->len * v->gran};
    }
    pthread_mutex_unlock(&v->lock);
    if (err) {
        for (size_t j = 0; j < *got; j++)
            close(p[j].fd);
        *got = 0;
    }
    return err;
}

/* CUDA_SUCCESS's counterpart: -ENOMEM, -EINVAL or -EIO. */
static int import_err(CUresult e)
{
    return e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM
           : e == CUDA_ERROR_INVALID_VALUE || e == CUDA_ERROR_INVALID_HANDLE ? -EINVAL
           : -EIO;
}

int shim_vmm_import_begin(size_t span, uintptr_t *base)
{
    pthread_once(&drv_once, drv_resolve);
    if (drv_missing || !drv.cuMemImportFromShareableHandle)
        return -EIO;
    CUdeviceptr va = 0;
    CUresult e = drv.cuMemAddressReserve(&va, span, 0, 0, 0);
    *base = (uintptr_t)va;
    return e == CUDA_SUCCESS ? 0 : import_err(e);
}

int shim_vmm_import_piece(uintptr_t base, size_t off, const shim_vmm_piece *p)
{
    CUmemGenericAllocationHandle h = 0;
    CUresult e = drv.cuMemImportFromShareableHandle(&h, (void *)(intptr_t)p->fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (e == CUDA_SUCCESS) {
        e = drv.cuMemMap(base + off, p->len, 0, h, 0);
        drv.cuMemRelease(h); /* the mapping keeps the memory */
    }
    if (e != CUDA_SUCCESS)
        shim_log(SHIM_LOG_ERROR, "mapping %zu bytes of another process's memory "
                 "failed: %s", p->len, vmm_errstr(e));
    return e == CUDA_SUCCESS ? 0 : import_err(e);
}

int shim_vmm_import_end(int dev, uintptr_t base, size_t span)
{
    CUresult e = vmm_set_access(base, span, 1ull << dev);
    if (e != CUDA_SUCCESS)
        shim_log(SHIM_LOG_ERROR, "device %d: access to %zu bytes of another process's "
                 "memory failed: %s", dev, span, vmm_errstr(e));
    return e == CUDA_SUCCESS ? 0 : import_err(e);
}

void shim_vmm_unimport(uintptr_t base, size_t span, const size_t *lens, size_t n)
{
    size_t off = 0;
    for (size_t k = 0; k < n; k++) {
        drv.cuMemUnmap(base + off, lens[k]);
        off += lens[k];
    }
    drv.cuMemAddressFree(base, span);
}

size_t shim_vmm_deferred(shim_vmm *v)
{
    pthread_mutex_lock(&v->lock);
    size_t n = v->nlater;
    pthread_mutex_unlock(&v->lock);
    return n;
}

/* Needs v->lock. */
static void unmap_locked(shim_vmm *v, uintptr_t addr, size_t size)
{
    while (size) {
        long k = vmm_find(v, addr);
        if (k < 0) {
            shim_log(SHIM_LOG_ERROR, "device %d: %#lx is in no VMM segment; "
                     "not unmapped", v->dev, (unsigned long)addr);
            return;
        }
        vmm_range *r = &v->r[k];
        size_t from = (addr - r->base) / v->gran;
        size_t here = r->base + r->size - addr < size ? r->base + r->size - addr : size;
        if (!drop(v, r, from, from + here / v->gran)) {
            shim_log(SHIM_LOG_ERROR, "device %d: %zu bytes at %#lx cut a "
                     "piece of a VMM segment; not unmapped", v->dev, here,
                     (unsigned long)addr);
            return;
        }
        addr += here;
        size -= here;
        if (r->mapped)
            continue;
        drv.cuMemAddressFree(r->base, r->size);
        free(r->g);
        memmove(r, r + 1, (v->n - (size_t)k - 1) * sizeof(*r));
        v->n--;
    }
}

void shim_vmm_unmap(shim_vmm *v, uintptr_t addr, size_t size)
{
    pthread_mutex_lock(&v->lock);
    unmap_locked(v, addr, size);
    pthread_mutex_unlock(&v->lock);
}

int shim_vmm_defer(shim_vmm *v, uintptr_t addr, size_t size)
{
    pthread_mutex_lock(&v->lock);
    int err = pool_grow((void **)&v->later, &v->later_cap, v->nlater, sizeof(*v->later))
                  ? 0 : -ENOBUFS;
    if (!err)
        v->later[v->nlater++] = (pool_span){addr, size};
    pthread_mutex_unlock(&v->lock);
    return err;
}

void shim_vmm_drain(shim_vmm *v)
{
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < v->nlater; i++)
        unmap_locked(v, v->later[i].addr, v->later[i].size);
    v->nlater = 0;
    pthread_mutex_unlock(&v->lock);
}
