/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvml.c - see nvml.h. Only four NVML entry points are used, declared here
 * (the toolkit ships no nvml.h with the runtime): init, a device handle by
 * PCI bus id (CUDA and NVML may number devices differently), and the v1
 * process list, whose two-field record every driver still accepts.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include "device.h"
#include "driver.h"
#include "real.h"
#include "symbols.h"
#include "nvml.h"
#include "stats.h"

typedef void *nvml_device;
typedef struct nvml_process { unsigned int pid; unsigned long long used; } nvml_process;

static struct {
    int (*init)(void);
    int (*by_bus_id)(const char *bus, nvml_device *dev);
    int (*processes)(nvml_device dev, unsigned int *count, nvml_process *out);
} nv;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int ready;

static void load(void)
{
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return;
    *(void **)&nv.init = shim_dlsym(lib, "nvmlInit_v2");
    *(void **)&nv.by_bus_id = shim_dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    *(void **)&nv.processes = shim_dlsym(lib, "nvmlDeviceGetComputeRunningProcesses");
    ready = nv.init && nv.by_bus_id && nv.processes && nv.init() == 0;
}

/* The device's PCI bus id, from the runtime if the process has one, else
 * from the driver. */
static bool bus_id(int dev, char *bus, int len)
{
    if (shim_real.cudaDeviceGetPCIBusId) {
        if (shim_real.cudaDeviceGetPCIBusId(bus, len, dev) == cudaSuccess)
            return true;
        shim_real.cudaGetLastError();
        return false;
    }
    CUdevice d;
    return shim_drv_resolve() == 0 && shim_drv.cuDeviceGet(&d, dev) == CUDA_SUCCESS &&
           shim_drv.cuDeviceGetPCIBusId(bus, len, d) == CUDA_SUCCESS;
}

uint64_t shim_nvml_process_memory(int dev)
{
    pthread_once(&once, load);
    char bus[32];
    nvml_device h;
    if (!ready || !bus_id(dev, bus, sizeof(bus)) || nv.by_bus_id(bus, &h) != 0)
        return STATS_UNKNOWN;
    nvml_process p[256];
    unsigned int n = 256;
    if (nv.processes(h, &n, p) != 0)
        return STATS_UNKNOWN;
    for (unsigned int i = 0; i < n; i++)
        if (p[i].pid == (unsigned int)getpid())
            return p[i].used;
    return STATS_UNKNOWN;
}
