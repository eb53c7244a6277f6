/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simvmm.c - the simulated driver's virtual memory calls, on the state of
 * simcuda.c (simcuda_internal.h).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>

#include "simcuda.h"
#include "simcuda_internal.h"

/* ---- the driver's virtual memory calls ------------------------------------
 * A reservation is an inaccessible mapping of host address space; a
 * physical allocation (handle) is counted against the device's capacity;
 * mapping one makes its range readable and writable (the real driver wants
 * cuMemSetAccess for that; the sim checks that it comes, see below).
 * With SIMCUDA_IPC=1 a physical allocation is a memfd (named after its
 * device), so that every mapping of it, in this process or in another
 * that imported it, shares its bytes, as device memory is shared. */

enum { GRANULE = 2 << 20, MAX_HANDLES = 1 << 16 };

typedef struct handle {
    size_t size;
    int dev, maps;
    int fd;         /* the memfd behind it (SIMCUDA_IPC=1), else -1 */
    bool released, used;
    bool shareable; /* created with requestedHandleTypes: POSIX fd */
    bool imported;  /* another process's memory: not counted here */
} handle;
static handle handles[MAX_HANDLES];

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
                                              CUmemAllocationGranularity_flags f)
{
    (void)p, (void)f;
    *g = GRANULE;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align,
                                    CUdeviceptr addr, unsigned long long flags)
{
    (void)addr, (void)flags;
    if (!size || size % GRANULE || (align && align % GRANULE))
        return CUDA_ERROR_INVALID_VALUE;
    /* Over-reserve to align the base. */
    size_t a = align ? align : GRANULE;
    char *p = mmap(NULL, size + a, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t b = ((uintptr_t)p + a - 1) & ~(uintptr_t)(a - 1);
    if (b > (uintptr_t)p)
        munmap(p, b - (uintptr_t)p);
    munmap((char *)b + size, (uintptr_t)p + a - b);
    *ptr = (CUdeviceptr)b;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    return munmap((void *)ptr, size) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static void handle_drop(int i)
{
    handle *h = &handles[i];
    if (h->released && h->maps == 0) {
        if (!h->imported)
            sim_st[h->dev].used -= h->size;
        if (h->fd >= 0)
            close(h->fd);
        h->used = false;
    }
}

EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *out, size_t size,
                            const CUmemAllocationProp *p, unsigned long long f)
{
    (void)f;
    if (!size || size % GRANULE || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    bool shareable = p->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if ((p->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
        (shareable && getenv("SIMCUDA_NO_FD_HANDLES")))
        return CUDA_ERROR_NOT_SUPPORTED;
    const char *ipc = getenv("SIMCUDA_IPC");
    pthread_mutex_lock(&sim_lock);
    sim_setup();
    int dev = p->location.id, i = 1, fd = -1;
    while (i < MAX_HANDLES && handles[i].used)
        i++;
    CUresult r = CUDA_SUCCESS;
    if (dev < 0 || dev >= sim_ndev)
        r = CUDA_ERROR_INVALID_DEVICE;
    static unsigned creates; /* since "create:N" appeared */
    if (r == CUDA_SUCCESS && (i == MAX_HANDLES || size > sim_st[dev].capacity - sim_st[dev].used ||
                              sim_fails_after("create", &creates)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS && ipc && *ipc == '1') {
        char name[32];
        snprintf(name, sizeof(name), "simcuda-dev%d", dev);
        fd = memfd_create(name, MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)size) != 0)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        if (r != CUDA_SUCCESS && fd >= 0)
            close(fd);
    }
    if (r == CUDA_SUCCESS) {
        handles[i] = (handle){.size = size, .dev = dev, .fd = fd, .used = true,
                              .shareable = shareable};
        sim_st[dev].used += size;
        *out = (CUmemGenericAllocationHandle)i;
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle hd)
{
    pthread_mutex_lock(&sim_lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (hd > 0 && hd < MAX_HANDLES && handles[hd].used && !handles[hd].released) {
        handles[hd].released = true;
        handle_drop((int)hd);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

/* Mapped ranges: address -> handle, to check unmaps. */
typedef struct mapping {
    uintptr_t addr;
    size_t size;
    int h;
    unsigned access; /* devices granted access (bit per device) */
} mapping;
static mapping maps[MAX_HANDLES];
static int nmaps;

EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t off,
                         CUmemGenericAllocationHandle hd, unsigned long long f)
{
    (void)f;
    pthread_mutex_lock(&sim_lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    bool taken = false; /* the real driver refuses to map over a mapping */
    for (int i = 0; i < nmaps; i++)
        taken |= maps[i].addr < ptr + size && ptr < maps[i].addr + maps[i].size;
    if (!taken && hd > 0 && hd < MAX_HANDLES && handles[hd].used && !handles[hd].released &&
        off == 0 && size == handles[hd].size && nmaps < MAX_HANDLES &&
        (handles[hd].fd >= 0
             ? mmap((void *)ptr, size, PROT_NONE, MAP_SHARED | MAP_FIXED, handles[hd].fd, 0)
             : mmap((void *)ptr, size, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0))
            != MAP_FAILED) {
        maps[nmaps++] = (mapping){ptr, size, (int)hd, 0};
        handles[hd].maps++;
        sim_st[handles[hd].dev].vmm_maps++;
        sim_st[handles[hd].dev].vmm_mapped += size;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    pthread_mutex_lock(&sim_lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < nmaps; i++) {
        if (maps[i].addr != ptr || maps[i].size != size)
            continue;
        handle *h = &handles[maps[i].h];
        /* Back to an inaccessible reservation. */
        mmap((void *)ptr, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        sim_st[h->dev].vmm_unmaps++;
        sim_st[h->dev].unsynced_unmaps += sim_work_pending[h->dev];
        sim_st[h->dev].vmm_mapped -= size;
        h->maps--;
        handle_drop(maps[i].h);
        maps[i] = maps[--nmaps];
        r = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

/* Read and write access, for each device described, to every mapping
 * inside the range, which must be mapped throughout. */
EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
                               const CUmemAccessDesc *d, size_t n)
{
    unsigned devs = 0;
    pthread_mutex_lock(&sim_lock);
    sim_setup();
    for (size_t k = 0; k < n; k++) {
        if (d[k].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
            d[k].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            d[k].location.id < 0 || d[k].location.id >= sim_ndev)
            devs = 0, k = n;
        else
            devs |= 1u << d[k].location.id;
    }
    size_t covered = 0;
    for (int i = 0; devs && i < nmaps; i++)
        if (maps[i].addr >= ptr && maps[i].addr + maps[i].size <= ptr + size)
            covered += maps[i].size;
    CUresult r = devs && covered == size && !mprotect((void *)ptr, size, PROT_READ | PROT_WRITE)
                     ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; r == CUDA_SUCCESS && i < nmaps; i++)
        if (maps[i].addr >= ptr && maps[i].addr + maps[i].size <= ptr + size)
            maps[i].access |= devs;
    pthread_mutex_unlock(&sim_lock);
    return r;
}

/* A POSIX file descriptor for a handle created shareable: a duplicate of
 * its memfd (SIMCUDA_IPC=1), which the caller closes. */
EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle hd,
                                             CUmemAllocationHandleType type,
                                             unsigned long long f)
{
    pthread_mutex_lock(&sim_lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (hd > 0 && hd < MAX_HANDLES && handles[hd].used && !handles[hd].released &&
        type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && !f && handles[hd].shareable) {
        int fd = handles[hd].fd < 0 ? -1 : fcntl(handles[hd].fd, F_DUPFD_CLOEXEC, 0);
        r = handles[hd].fd < 0 ? CUDA_ERROR_NOT_SUPPORTED /* not SIMCUDA_IPC=1 */
            : fd < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
        if (r == CUDA_SUCCESS)
            *(int *)out = fd;
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

/* A handle of this process for the memfd os (a file descriptor, which
 * stays the caller's): its device is in the memfd's name. */
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *out, void *os,
                                               CUmemAllocationHandleType type)
{
    int fd = (int)(intptr_t)os, dev = -1;
    char path[64], name[128];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, name, sizeof(name) - 1);
    name[n > 0 ? n : 0] = '\0';
    if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st) != 0 ||
        sscanf(name, "/memfd:simcuda-dev%d", &dev) != 1 || !st.st_size ||
        st.st_size % GRANULE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    sim_setup();
    int i = 1;
    while (i < MAX_HANDLES && handles[i].used)
        i++;
    int mine = i < MAX_HANDLES ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
    CUresult r = dev < 0 || dev >= sim_ndev ? CUDA_ERROR_INVALID_DEVICE
                 : mine < 0 ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        handles[i] = (handle){.size = (size_t)st.st_size, .dev = dev, .fd = mine,
                              .used = true, .imported = true};
        *out = (CUmemGenericAllocationHandle)i;
    }
    pthread_mutex_unlock(&sim_lock);
    return r;
}

unsigned simcuda_vmm_access(uintptr_t addr)
{
    unsigned a = 0;
    pthread_mutex_lock(&sim_lock);
    for (int i = 0; i < nmaps; i++)
        if (maps[i].addr <= addr && addr < maps[i].addr + maps[i].size)
            a = maps[i].access;
    pthread_mutex_unlock(&sim_lock);
    return a;
}
