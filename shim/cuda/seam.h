/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seam.h - the CUDA seam: every CUDA operation the device's pools and
 * fence make, as one table with two instances, the program's runtime and
 * the driver. A device whose pool was made while the process had a
 * dynamic runtime calls the runtime (its calls make the primary context as
 * cudaMalloc would); one made without (a static runtime, a driver-API
 * program, CuPy, XLA) calls the driver in the context the pool serves.
 * shim_cuda_of picks the instance.
 *
 * Each runtime operation raises the re-entry guard (process.h) around its
 * call, so the runtime's own driver calls inside reach the real driver,
 * not the shim again, and leaves no error behind in the runtime. Codes are
 * the runtime's or the driver's (they agree on success, 1 invalid value,
 * 2 out of memory and 600 not ready: checked at compile time in seam.c);
 * shim_cuda_errno maps them to the pool's errors in one place.
 */
#ifndef CUPOOL_SHIM_SEAM_H
#define CUPOOL_SHIM_SEAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

/* What enter() saves of the calling thread's current device or context. */
typedef struct shim_saved { int dev; CUcontext ctx; } shim_saved;

typedef struct shim_cuda {
    /* A segment of size bytes; own: the context the device's pools serve
     * (the driver's, made current on a thread that has none). */
    int (*mem_alloc)(CUcontext own, size_t size, uintptr_t *base);
    int (*mem_free)(uintptr_t p);
    int (*mem_info)(size_t *free_b, size_t *total);
    int (*sync)(void);
    int (*event_create)(cudaEvent_t *e); /* without timing */
    void (*event_destroy)(cudaEvent_t e);
    int (*record)(cudaEvent_t e, cudaStream_t s);
    int (*wait)(cudaStream_t s, cudaEvent_t e);
    /* Whether s is capturing; true if that cannot be told. */
    bool (*capturing)(cudaStream_t s);
    /* Swaps the calling thread's capture mode with *mode (the runtime's
     * and the driver's enums agree); false, *mode untouched, if this API
     * has no such call. */
    bool (*exchange_mode)(int *mode);
    /* Makes device dev (context own) current on the calling thread; *saved
     * is what leave() puts back. */
    bool (*enter)(int dev, CUcontext own, shim_saved *saved);
    void (*leave)(const shim_saved *saved);
    const char *(*strerror)(int e);
} shim_cuda;

extern const shim_cuda shim_cuda_runtime, shim_cuda_driver;

/* How the shim calls CUDA for a device: through the program's runtime, or
 * the driver. Decided at the device's first use; 0 until then. */
enum { SHIM_API_RUNTIME = 1, SHIM_API_DRIVER = 2 };

/* True while the calling thread serves a request that came through the
 * driver: the shim's own calls then go to the driver too (the runtime may
 * have made that call holding its own locks: calling back into the
 * runtime could wait on them). Set by the driver's entry points. */
extern _Thread_local bool shim_via_driver;

/* The instance for a device whose api (SHIM_API_*) is api. */
static inline const shim_cuda *shim_cuda_for(int api)
{
    return shim_via_driver || api == SHIM_API_DRIVER ? &shim_cuda_driver : &shim_cuda_runtime;
}

/* 0 once the work before e's record has completed, cudaErrorNotReady
 * until then: the driver's query when there is one (it leaves no error in
 * the runtime, and the runtime's events are the driver's). */
int shim_cuda_query(const shim_cuda *c, cudaEvent_t e);

/* A CUDA code as the pool's error: 0, -ENOMEM (out of memory) or -EIO. */
int shim_cuda_errno(int code);

#endif
