/* SPDX-License-Identifier: Apache-2.0 */
/*
 * devstate.h - what cupool knows of each device: its shards' pools, its
 * cap, the streams and fences of its fence, the CUDA seam it calls, and
 * its counters. Written by device.c, fence.c, capture.c and the entry
 * points that pass memory on (passed.c) or adopt a context
 * (interpose_driver.c); read by the statistics (control.c).
 */
#ifndef CUPOOL_SHIM_DEVSTATE_H
#define CUPOOL_SHIM_DEVSTATE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "comm.h"
#include "config.h"
#include "seam.h"
#include "pool.h"
#include "stats.h"
#include "vmm.h"

typedef struct shim_stream {
    cudaStream_t stream;
    cudaEvent_t event;     /* recorded on it by the fence (non-blocking) */
    bool nonblocking;
    bool lazy;             /* comm.h knows it: a poll fence may leave it
                              out, and it may owe its order */
} shim_stream;

/* A poll fence begun and not yet done (CUPOOL_FENCE=poll): an event on the
 * legacy stream, and one on each non-blocking stream tracked when it
 * began. It is done once those on the non-blocking streams have completed
 * and either the legacy one has, or every non-blocking stream was made to
 * wait for it (ordered). */
typedef struct shim_fence {
    uint64_t ticket;
    cudaEvent_t legacy;
    cudaEvent_t *events;   /* on the non-blocking streams; NULL once done */
    size_t nevents, ndone; /* the first ndone have completed */
    size_t events_cap;
} shim_fence;

struct shim_device;
struct shim_trace_ring;

/* What the backend of one shard's pool knows: its device, and the ring its
 * events are recorded to (NULL when not recording). */
typedef struct shim_shard {
    struct shim_device *dev;
    int id;                      /* the device's */
    struct shim_trace_ring *ring;
} shim_shard;

/* The device's own counters, stats.h's STATS_DEVICE_COUNTS: SHIM_DEV_<name>
 * indexes shim_device's count. */
enum shim_dev_count {
#define SHIM_DEV_ENUM(name, unit, kind, help) SHIM_DEV_##name,
    STATS_DEVICE_COUNTS(SHIM_DEV_ENUM)
#undef SHIM_DEV_ENUM
    SHIM_DEV_NCOUNTS
};

typedef struct shim_device {
    int id;
    shim_shard shards[SHIM_SHARDS_MAX]; /* the backends' contexts */
    _Atomic(pool *) pools[SHIM_SHARDS_MAX]; /* shards, created on first use */
    /* The cap: every shard's pool takes from it for each segment, and
     * passed.c for the memory passed on; its limit is 0 until known
     * (shim_device_cap). */
    pool_budget budget;
    atomic_bool cap_known;
    _Atomic uint64_t reserved; /* bytes reserved by all shards */
    _Atomic uint64_t reserved_peak;
    pthread_mutex_t lock;      /* guards streams and events */
    shim_stream *streams;
    size_t nstreams, streams_cap;
    size_t nnb, neager;        /* of them non-blocking, and of those the
                                  ones comm.h does not know */
    shim_comm_due_stream *due; /* a poll fence's streams due (comm.h) */
    size_t due_cap;
    cudaEvent_t legacy_event;
    /* Poll fences (CUPOOL_FENCE=poll), oldest first, and events to reuse. */
    shim_fence *fences;
    size_t nfences, fences_cap;
    cudaEvent_t *spare_events;
    size_t nspare, spare_cap;
    /* Events recorded on non-blocking streams as they were destroyed (their
     * queued work goes on): the next fence orders after them too. */
    cudaEvent_t *orphans;
    size_t norphans, orphans_cap;
    uint64_t tickets;          /* the last ticket handed out */
    _Atomic uint64_t tickets_done; /* every fence up to this ticket is done:
                                      written under lock */
    cudaEvent_t order_event;   /* the legacy event non-blocking streams
                                  last waited for, or owe (comm.h): a new
                                  one waits too */
    pthread_mutex_t order_lock; /* guards order_event's swap against a
                                   stream paying (taken under lock, or
                                   alone) */
    _Atomic uint64_t fences_begun; /* fences begun (FULL or BEGIN): written
                                      under lock, read before it */
    uint64_t full_seq, begin_seq; /* the last full fence and poll fence
                                     issued: their number in fences_begun */
    uint64_t begin_ticket;     /* and the poll fence's ticket */
    atomic_ulong count[SHIM_DEV_NCOUNTS]; /* its counters (shim_device_count) */
    _Atomic uint64_t fenced_work; /* CUPOOL_CUPTI: the work count read
                                     before the last fence that was issued */
    shim_vmm *vmm;             /* CUPOOL_VMM segments, or NULL */
    bool vmm_tried;
    bool stitch;               /* vmm is set and stitches (CUPOOL_STITCH) */
    atomic_int api;            /* SHIM_API_*: how the shim calls CUDA */
    _Atomic(CUcontext) ctx;    /* the context its pools serve, once known */
    _Atomic uint64_t passed;   /* bytes allocated through calls passed on
                                  (passed.c); they count against cap */
    _Atomic uint64_t passed_peak;
} shim_device;

/* Decides dev's api (seam.h: SHIM_API_*) if not yet decided; returns it. */
int shim_device_api(int dev);

/* The CUDA seam's instance the shim calls for d (seam.h). */
static inline const shim_cuda *shim_device_cuda(const struct shim_device *d)
{
    return shim_cuda_for(atomic_load_explicit(&d->api, memory_order_relaxed));
}

extern shim_device shim_devices[SHIM_MAX_DEVICES];

/* Sets up shim_devices; first thing at start-up (control.c's constructor,
 * the shim's only one). */
void shim_devices_init(void);

/* The shard if it exists, else NULL. Never creates. */
static inline pool *shim_device_shard_if_any(int dev, int s)
{
    return atomic_load_explicit(&shim_devices[dev].pools[s], memory_order_acquire);
}

/* The device's statistics summed over its shards (peaks of gauges other
 * than reserved are sums of the shards' peaks: upper bounds). False if the
 * device has no pool. */
bool shim_device_stats(int dev, pool_stats *sum);

/* The device's free and total memory, through its runtime or driver:
 * 0 or the error code (both zero on error). */
int shim_device_mem_info(int dev, size_t *free_b, size_t *total);

/* Releases the idle segments of every shard of dev; returns the bytes. */
uint64_t shim_device_flush(int dev);

/* Adds n to d's counter c (relaxed: a count, ordering nothing). Any
 * thread, any lock held or none: it never blocks. */
static inline void shim_device_count(shim_device *d, enum shim_dev_count c, unsigned long n)
{
    atomic_fetch_add_explicit(&d->count[c], n, memory_order_relaxed);
}

/* Copies dev's counters into out's fields of the same names (each read
 * atomically on its own), for the statistics views. */
void shim_device_counts_fill(int dev, stats_device *out);

/* The context dev's pools serve, or NULL before its first pool (and after
 * its context went). */
static inline CUcontext shim_device_ctx(int dev)
{
    return atomic_load(&shim_devices[dev].ctx);
}

/* dev's VMM segments (CUPOOL_VMM, CUPOOL_STITCH), or NULL: set once, at
 * its first pool. */
static inline shim_vmm *shim_device_vmm(int dev)
{
    return shim_devices[dev].vmm;
}

/* Makes c the context dev's pools serve if none is recorded (its pools
 * outlived a reset of their context); returns the one recorded now. */
static inline CUcontext shim_device_ctx_adopt(int dev, CUcontext c)
{
    CUcontext had = NULL;
    return atomic_compare_exchange_strong(&shim_devices[dev].ctx, &had, c) ? c : had;
}

#endif
