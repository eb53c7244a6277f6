/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simcopy.c - the simulated driver's pinned host memory and copies
 * between host and device memory (cupool pause's own move), each reported
 * to CUPTI; and the failures a test asks for while a program runs:
 * SIMCUDA_FAIL_FILE names a file whose words ("hostalloc": pinning by
 * cuMemHostAlloc or cuMemHostRegister; "create", "copy")
 * make those calls fail for as long as it says so, so that a test can
 * fail a call between a pause and a resume; "create:N" lets N more
 * through first; "slowmemset" keeps cudaMemsetAsync inside the driver
 * for 10 s, between its entry and its work (FILE.inside written first);
 * "slowcopy" keeps each copy to the device 0.3 s before its bytes land;
 * "copy:N" lets N copies to the host through first, and "slowfail" makes
 * a failing one fail 0.3 s late.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include <cupti_driver_cbid.h>

#include "simcuda_internal.h"

bool sim_fails_after(const char *what, unsigned *count)
{
    const char *path = getenv("SIMCUDA_FAIL_FILE");
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    char word[64];
    size_t n = strlen(what);
    bool yes = false, named = false;
    while (f && !named && fscanf(f, "%63s", word) == 1) {
        if (strncmp(word, what, n) || (word[n] && word[n] != ':'))
            continue;
        named = true;
        yes = !word[n] || !count || ++*count > (unsigned)atoi(word + n + 1);
    }
    if (f)
        fclose(f);
    if (!named && count)
        *count = 0;
    return yes;
}

void sim_slow_call(unsigned seconds)
{
    char path[512];
    snprintf(path, sizeof(path), "%s.inside", getenv("SIMCUDA_FAIL_FILE"));
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    sleep(seconds);
}

bool sim_fails(const char *what)
{
    return sim_fails_after(what, NULL);
}

EXPORT CUresult cuMemHostAlloc(void **p, size_t size, unsigned int flags)
{
    (void)flags;
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc);
    if (sim_fails("hostalloc"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = malloc(size);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned int flags)
{
    (void)p, (void)size, (void)flags;
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemHostRegister_v2);
    return sim_fails("hostalloc") ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
    (void)p;
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemHostUnregister);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemFreeHost(void *p)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost);
    free(p);
    return CUDA_SUCCESS;
}

/* A copy runs at once (touching the device memory: a range with nothing
 * mapped faults, as the GPU would). */
EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    (void)s;
    sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, NULL, CUPTI_API_ENTER);
    static unsigned copies; /* since "copy:N" appeared; under sim_lock */
    pthread_mutex_lock(&sim_lock);
    bool fail = sim_fails_after("copy", &copies);
    pthread_mutex_unlock(&sim_lock);
    if (fail && sim_fails("slowfail")) /* fails late: the copies before it have landed */
        usleep(300000);
    if (!fail)
        memcpy(dst, (const void *)src, n);
    sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2, NULL, CUPTI_API_EXIT);
    return fail ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    (void)s;
    sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, NULL, CUPTI_API_ENTER);
    bool fail = sim_fails("copy");
    if (!fail && sim_fails("slowcopy")) /* in flight a while: its memory must stay */
        usleep(300000);
    if (!fail)
        memcpy((void *)dst, src, n);
    sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, NULL, CUPTI_API_EXIT);
    return fail ? CUDA_ERROR_UNKNOWN : CUDA_SUCCESS;
}

EXPORT CUresult cuStreamSynchronize(CUstream s)
{
    (void)s;
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize);
    return CUDA_SUCCESS;
}
