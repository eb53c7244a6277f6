/*
 * vmm.c - see vmm.h.
 *
 * The driver calls are the loaded driver's own (driver.h), so the tests'
 * simulated driver can stand in.
 * Each reservation keeps one handle per granule, in address order; a
 * handle of 0 is a granule already given back. A stitched reservation maps
 * handles that other reservations own: unmapping it releases none.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "log.h"
#include "driver.h"
#include "grow.h"
#include "vmm.h"

/* The driver's own functions (shim_drv): cupool's VMM segments are the
 * pool's, never counted as memory passed through. */
#define drv shim_drv
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

typedef struct vmm_range {
    uintptr_t base;
    size_t size;
    size_t mapped;                   /* granules still mapped */
    CUmemGenericAllocationHandle *h; /* one per granule; 0 = given back */
    bool borrowed;                   /* stitched: the handles are others' */
} vmm_range;

typedef struct span { uintptr_t addr; size_t size; } span;

struct shim_vmm {
    int dev;
    size_t unit;
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    pthread_mutex_t lock;
    vmm_range *r; /* sorted by base */
    size_t n, cap;
    span *later;  /* shim_vmm_defer */
    size_t nlater, later_cap;
};

static const char *errstr(CUresult e)
{
    const char *s = NULL;
    if (drv.cuGetErrorString(e, &s) != CUDA_SUCCESS || !s)
        s = "unknown driver error";
    return s;
}

shim_vmm *shim_vmm_open(int dev)
{
    pthread_once(&drv_once, drv_resolve);
    if (drv_missing) {
        shim_log(SHIM_LOG_ERROR, "CUPOOL_VMM: the driver call %s is not "
                 "available; using cudaMalloc'd segments", drv_missing);
        return NULL;
    }
    CUdevice cd;
    int ok = 0;
    size_t unit = 0;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE}};
    CUresult e = drv.cuDeviceGet(&cd, dev);
    if (e == CUDA_SUCCESS)
        e = drv.cuDeviceGetAttribute(
            &ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, cd);
    prop.location.id = cd;
    if (e == CUDA_SUCCESS && ok)
        e = drv.cuMemGetAllocationGranularity(&unit, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    if (e != CUDA_SUCCESS || !ok || !unit || (unit & (unit - 1))) {
        shim_log(SHIM_LOG_ERROR, "CUPOOL_VMM: device %d %s; using cudaMalloc'd "
                 "segments", dev, e != CUDA_SUCCESS ? errstr(e)
                 : !ok ? "does not support virtual memory management"
                 : "reports an unusable granularity");
        return NULL;
    }
    shim_vmm *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    v->dev = dev;
    v->unit = unit;
    v->prop = prop;
    v->access = (CUmemAccessDesc){.location = prop.location,
                                  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    pthread_mutex_init(&v->lock, NULL);
    return v;
}

size_t shim_vmm_unit(const shim_vmm *v) { return v->unit; }

/* Index of the range holding addr, or -1. Needs v->lock. */
static long find(const shim_vmm *v, uintptr_t addr)
{
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (addr < v->r[mid].base)
            hi = mid;
        else if (addr - v->r[mid].base >= v->r[mid].size)
            lo = mid + 1;
        else
            return (long)mid;
    }
    return -1;
}

/* Unmaps and releases granules [from, to) of range r. */
static void drop(shim_vmm *v, vmm_range *r, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        if (!r->h[i])
            continue;
        CUresult e = drv.cuMemUnmap(r->base + i * v->unit, v->unit);
        if (e == CUDA_SUCCESS && !r->borrowed)
            e = drv.cuMemRelease(r->h[i]);
        if (e != CUDA_SUCCESS)
            shim_log(SHIM_LOG_WARN, "device %d: giving back %zu bytes at %#lx "
                     "failed: %s", v->dev, v->unit,
                     (unsigned long)(r->base + i * v->unit), errstr(e));
        r->h[i] = 0;
        r->mapped--;
    }
}

/* Inserts r into v->r, sorted by base. Needs v->lock. False: no memory. */
static bool insert_locked(shim_vmm *v, const vmm_range *r)
{
    if (!shim_grow((void **)&v->r, &v->cap, v->n, sizeof(*v->r)))
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

int shim_vmm_map(shim_vmm *v, size_t size, uintptr_t *base)
{
    if (!size || size % v->unit)
        return -EIO;
    size_t n = size / v->unit;
    vmm_range r = {.size = size, .h = calloc(n, sizeof(*r.h))};
    if (!r.h)
        return -ENOMEM;
    CUdeviceptr va = 0;
    CUresult e = drv.cuMemAddressReserve(&va, size, v->unit, 0, 0);
    r.base = (uintptr_t)va;
    for (size_t i = 0; e == CUDA_SUCCESS && i < n; i++) {
        e = drv.cuMemCreate(&r.h[i], v->unit, &v->prop, 0);
        if (e != CUDA_SUCCESS) {
            r.h[i] = 0;
            break;
        }
        e = drv.cuMemMap(va + i * v->unit, v->unit, 0, r.h[i], 0);
        if (e != CUDA_SUCCESS) {
            drv.cuMemRelease(r.h[i]);
            r.h[i] = 0;
            break;
        }
        r.mapped++;
    }
    if (e == CUDA_SUCCESS)
        e = drv.cuMemSetAccess(va, size, &v->access, 1);
    pthread_mutex_lock(&v->lock);
    if (e == CUDA_SUCCESS && !insert_locked(v, &r))
        e = CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_unlock(&v->lock);
    if (e == CUDA_SUCCESS) {
        *base = r.base;
        return 0;
    }
    /* Nothing of it was used yet: no need to wait for the device. */
    drop(v, &r, 0, n);
    if (va)
        drv.cuMemAddressFree(va, size);
    free(r.h);
    if (e != CUDA_ERROR_OUT_OF_MEMORY)
        shim_log(SHIM_LOG_ERROR, "device %d: mapping a %zu-byte segment "
                 "failed: %s", v->dev, size, errstr(e));
    return e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

int shim_vmm_stitch(shim_vmm *v, const pool_span *parts, size_t n,
                    uintptr_t *base)
{
    size_t size = 0;
    for (size_t k = 0; k < n; k++) {
        if (!parts[k].size || parts[k].size % v->unit || parts[k].addr % v->unit)
            return -EIO;
        size += parts[k].size;
    }
    vmm_range r = {.size = size, .borrowed = true,
                   .h = calloc(size / v->unit, sizeof(*r.h))};
    if (!r.h)
        return -ENOMEM;
    CUdeviceptr va = 0;
    CUresult e = drv.cuMemAddressReserve(&va, size, v->unit, 0, 0);
    r.base = (uintptr_t)va;
    pthread_mutex_lock(&v->lock);
    size_t g = 0; /* granules mapped */
    for (size_t k = 0; e == CUDA_SUCCESS && k < n; k++) {
        for (uintptr_t a = parts[k].addr; a < parts[k].addr + parts[k].size; a += v->unit) {
            long i = find(v, a);
            CUmemGenericAllocationHandle h = i < 0 ? 0 : v->r[i].h[(a - v->r[i].base) / v->unit];
            e = h ? drv.cuMemMap(va + g * v->unit, v->unit, 0, h, 0)
                  : CUDA_ERROR_INVALID_VALUE;
            if (e != CUDA_SUCCESS)
                break;
            r.h[g++] = h;
            r.mapped++;
        }
    }
    if (e == CUDA_SUCCESS)
        e = drv.cuMemSetAccess(va, size, &v->access, 1);
    if (e == CUDA_SUCCESS && !insert_locked(v, &r))
        e = CUDA_ERROR_OUT_OF_MEMORY;
    if (e != CUDA_SUCCESS) /* nothing used it yet */
        drop(v, &r, 0, g);
    pthread_mutex_unlock(&v->lock);
    if (e == CUDA_SUCCESS) {
        *base = r.base;
        return 0;
    }
    if (va)
        drv.cuMemAddressFree(va, size);
    free(r.h);
    if (e != CUDA_ERROR_OUT_OF_MEMORY)
        shim_log(SHIM_LOG_ERROR, "device %d: stitching %zu bytes from %zu "
                 "parts failed: %s", v->dev, size, n, errstr(e));
    return e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
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
        long k = find(v, addr);
        if (k < 0) {
            shim_log(SHIM_LOG_ERROR, "device %d: %#lx is in no VMM segment; "
                     "not unmapped", v->dev, (unsigned long)addr);
            return;
        }
        vmm_range *r = &v->r[k];
        size_t from = (addr - r->base) / v->unit;
        size_t here = r->base + r->size - addr < size ? r->base + r->size - addr : size;
        drop(v, r, from, from + here / v->unit);
        addr += here;
        size -= here;
        if (r->mapped)
            continue;
        drv.cuMemAddressFree(r->base, r->size);
        free(r->h);
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
    int err = shim_grow((void **)&v->later, &v->later_cap, v->nlater, sizeof(*v->later))
                  ? 0 : -ENOMEM;
    if (!err)
        v->later[v->nlater++] = (span){addr, size};
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
