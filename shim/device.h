/*
 * device.h - one pool per device, the CUDA backend that feeds it, and the
 * streams the fence must order.
 */
#ifndef CUPOOL_SHIM_DEVICE_H
#define CUPOOL_SHIM_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "comm.h"
#include "config.h"
#include "driver.h"
#include "process.h"
#include "pool.h"
#include "real.h"
#include "vmm.h"

typedef struct shim_stream {
    cudaStream_t stream;
    cudaEvent_t event;     /* recorded on it by the fence (non-blocking) */
    bool nonblocking;
    bool comm_due;         /* the fence being begun includes it (poll) */
    shim_comm_mark comm_mark; /* what shim_comm_needs said then */
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
    uint64_t tickets_done;     /* every fence up to this ticket is done */
    cudaEvent_t order_event;   /* the legacy event non-blocking streams
                                  last waited for: a new one waits too */
    atomic_ulong fence_orders; /* poll fences finished by making streams
                                  wait, rather than by completion */
    atomic_ulong syncs;        /* device synchronizations by the fence */
    atomic_ulong fences_skipped; /* fences that needed no CUDA call */
    atomic_ulong fence_streams_left; /* comm streams poll fences left out */
    _Atomic uint64_t fenced_work; /* CUPOOL_CUPTI: the work count read
                                     before the last fence that was issued */
    shim_vmm *vmm;             /* CUPOOL_VMM segments, or NULL */
    bool vmm_tried;
    atomic_int api;            /* SHIM_API_*: how the shim calls CUDA */
    _Atomic(CUcontext) ctx;    /* the context its pools serve, once known */
    _Atomic uint64_t passed;   /* bytes allocated through calls passed on
                                  (passed.c); they count against cap */
    _Atomic uint64_t passed_peak;
} shim_device;

/* How the shim calls CUDA for a device: through the program's runtime, or
 * (a static runtime, a driver-API program, CuPy, XLA) the driver. Decided
 * at the device's first use; 0 until then. */
enum { SHIM_API_RUNTIME = 1, SHIM_API_DRIVER = 2 };

/* Decides dev's api if not yet decided; returns it. */
int shim_device_api(int dev);

/* True while the calling thread serves a request that came through the
 * driver: the shim's own calls then go to the driver too. */
extern _Thread_local bool shim_via_driver;

/* dev's cap in bytes (0 = none), without making its pool: the pool's once
 * it exists, else from the options (a share of the device asks the driver
 * its size; 0 if it cannot tell yet). */
uint64_t shim_device_cap(int dev);

/* What enter() saves of the calling thread's current device or context. */
typedef struct shim_saved { int dev; CUcontext ctx; } shim_saved;

extern shim_device shim_devices[SHIM_MAX_DEVICES];

/* Sets up shim_devices; first thing at start-up (control.c's constructor,
 * the shim's only one). */
void shim_devices_init(void);

/* Shard s of the device's pools, created on first use (with the device
 * current); NULL if it cannot be created (the caller passes through). */
pool *shim_device_shard(int dev, int s);

/* The shard if it exists, else NULL. Never creates. */
static inline pool *shim_device_shard_if_any(int dev, int s)
{
    return atomic_load_explicit(&shim_devices[dev].pools[s], memory_order_acquire);
}

/* Allocates size bytes from the pool that serves the calling thread (its
 * shard, or shard 0 for a large request), releasing every shard's idle
 * segments and retrying once if the cap or the device says no. 0, -ENODEV
 * (no pool: the caller passes the call on) or pool_alloc's error. */
int shim_device_alloc(int dev, size_t size, uintptr_t *addr);

/* Frees addr in whichever shard of whichever device owns it: the one the
 * owner hint names first, then device guess's (-1: none; the calling
 * thread's shard first), then the other devices'. 0, or pool_free's error
 * (-ENOENT: no pool owns it). */
int shim_device_free(int guess, uintptr_t addr);

/* True if ptr lies inside a segment of any device's pool (a free of it is
 * the pool's). */
bool shim_device_owns(void *ptr);

/* pool_segment_of over the device's shards. */
int shim_device_segment_of(int dev, uintptr_t addr, uintptr_t *base, size_t *size);

/* The device's statistics summed over its shards (peaks of gauges other
 * than reserved are sums of the shards' peaks: upper bounds). False if the
 * device has no pool. */
bool shim_device_stats(int dev, pool_stats *sum);

/* Releases the idle segments of every shard of dev; returns the bytes. */
uint64_t shim_device_flush(int dev);

/* Empties the device's pools without releasing anything (after
 * cudaDeviceReset: the reset freed it all). */
void shim_device_abandon(int dev);

/* The device's free and total memory, through its runtime or driver:
 * 0 or the error code (both zero on error). */
int shim_device_mem_info(int dev, size_t *free_b, size_t *total);

/* Stream tracking for the fence. */
void shim_device_track_stream(int dev, cudaStream_t s, unsigned int flags);
void shim_device_untrack_stream(cudaStream_t s);

/* Graph captures begun through the interposed runtime and not yet ended.
 * While there are none, the fence skips its capture checks (four CUDA calls,
 * 140 ns on an H200). shim_capture_begin is called before the real begin:
 * it returns once no fence that could have missed it is still running. */
void shim_capture_begin(void);
void shim_capture_end(void);

/* A capture begun on stream (the per-thread stream resolved) in mode (a
 * cudaStreamCaptureMode; the driver's enum agrees), by the calling thread;
 * shim_capture_ended undoes it and shim_capture_end. */
void shim_capture_note(void *stream, int mode);
void shim_capture_ended(void *stream);

/* Whether a capture counted now. */
bool shim_captures_open(void);

/* Around a real capture begin (runtime or driver): shim_capture_starts
 * counts it beforehand (false if the shim does not: inside it, or off);
 * shim_capture_started notes its stream and mode if it began, else uncounts
 * it. */
bool shim_capture_starts(void);
void shim_capture_started(bool counted, bool begun, void *stream, bool per_thread, int mode);

/* True (after one line naming the cause) if a graph capture forbids the
 * calling thread the allocation call named call now (shim_capture_forbids,
 * with the thread's mode read through the driver or the runtime). */
bool shim_capture_refuses(const char *call, bool driver);

/* Whether CUDA forbids the calling thread, whose capture mode is
 * thread_mode, a potentially unsafe call (cudaMalloc, cudaFree) now: a
 * capture of its own not in relaxed mode, or, in global mode, another
 * thread's capture in global mode (cudaThreadExchangeStreamCaptureMode). */
bool shim_capture_forbids(int thread_mode);

/* Releases every device's fully free segments; returns bytes released.
 * Sets each device current on the calling thread while it works. */
uint64_t shim_device_flush_all(void);

#endif
