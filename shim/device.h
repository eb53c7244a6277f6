/*
 * device.h - one pool per device, the CUDA backend that feeds it, and the
 * streams the fence must order.
 */
#ifndef CUPOOL_SHIM_DEVICE_H
#define CUPOOL_SHIM_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "config.h"
#include "pool.h"
#include "real.h"

typedef struct shim_stream {
    cudaStream_t stream;
    cudaEvent_t event;     /* recorded on it by the fence (non-blocking) */
    bool nonblocking;
} shim_stream;

typedef struct shim_device {
    int id;
    _Atomic(pool *) pool;      /* NULL until the device's first allocation */
    uint64_t cap;              /* bytes; 0 = none */
    pthread_mutex_t lock;      /* guards streams and events */
    shim_stream *streams;
    size_t nstreams, streams_cap;
    cudaEvent_t legacy_event;
    atomic_ulong syncs;        /* device synchronizations by the fence */
} shim_device;

extern shim_device shim_devices[SHIM_MAX_DEVICES];
extern shim_config shim_cfg;

/* The device's pool, created on first use with the device current; NULL
 * if it cannot be created (then the caller passes through). */
pool *shim_device_pool(int dev);

/* The pool if it exists, else NULL. Never creates. */
static inline pool *shim_device_pool_if_any(int dev)
{
    return atomic_load_explicit(&shim_devices[dev].pool, memory_order_acquire);
}

/* Empties the device's pool without releasing anything (after
 * cudaDeviceReset: the reset freed it all). */
void shim_device_abandon(int dev);

/* Stream tracking for the fence. */
void shim_device_track_stream(int dev, cudaStream_t s, unsigned int flags);
void shim_device_untrack_stream(cudaStream_t s);

/* Releases every device's fully free segments; returns bytes released.
 * Sets each device current on the calling thread while it works. */
uint64_t shim_device_flush_all(void);

#endif
