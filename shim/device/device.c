/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device.c - per-device pools and the CUDA backend that feeds them:
 * segments reserved through the CUDA seam (seam.h) or, with CUPOOL_VMM,
 * the driver's virtual memory calls (vmm.c, which may also give back parts
 * of them: trim); the fence is fence.c's. Like the real cudaFree, giving
 * memory back first waits for the device; while a capture is open it
 * cannot, so a trim is refused and a release waits for the next chance.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "cap.h"
#include "capture.h"
#include "cupti.h"
#include "device.h"
#include "driver.h"
#include "fence.h"
#include "grow.h"
#include "log.h"
#include "owner.h"
#include "process.h"
#include "real.h"
#include "recorder.h"
#include "stats.h"

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- CUDA calls: through the seam (seam.h) ---------------------------- */


/* Makes the device's context current on the calling thread (the helper's,
 * for a flush); *saved is what to put back with leave(). */
static bool enter(const shim_device *d, shim_saved *saved)
{
    return shim_device_cuda(d)->enter(d->id, atomic_load(&d->ctx), saved);
}

static void leave(const shim_device *d, const shim_saved *saved)
{
    shim_device_cuda(d)->leave(saved);
}

/* ---- backend ------------------------------------------------------------ */

/* A cudaMalloc'd (cuMemAlloc'd) segment: 0, -ENOMEM or -EIO. */
static int cuda_reserve(const shim_device *d, size_t size, uintptr_t *base)
{
    return shim_cuda_errno(shim_device_cuda(d)->mem_alloc(atomic_load(&d->ctx), size, base));
}

/* The pool took size bytes from the device's budget (the cap) already. */
static int be_reserve(void *ctx, size_t size, uintptr_t *base)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    uint64_t now = atomic_fetch_add(&d->reserved, size) + size;
    int err = d->vmm ? shim_vmm_map(d->vmm, size, base) : cuda_reserve(d, size, base);
    if (!err) {
        /* The peak counts what the driver gave, never a failed request. */
        uint64_t peak = atomic_load(&d->reserved_peak);
        while (now > peak && !atomic_compare_exchange_weak(&d->reserved_peak, &peak, now))
            ;
        /* Stamped after the driver handed it out (see recorder.c). */
        shim_trace_put(sh->ring, true, TRACE_RESERVE, TRACE_R_OK, d->id, *base, size);
        shim_owner_set(*base, size, d->id, (int)(sh - d->shards));
        return 0;
    }
    atomic_fetch_sub(&d->reserved, size);
    shim_trace_put(sh->ring, true, TRACE_RESERVE,
                   err == -ENOMEM ? TRACE_R_NOMEM : TRACE_R_ERROR, d->id, 0, size);
    return err;
}

/* Waits for all work on the device, as the real cudaFree does, so that
 * VMM memory can be unmapped; then unmaps what waited for that. False
 * while a capture is open (waiting would break it) or if the wait failed. */
static bool vmm_settle(shim_device *d)
{
    if (shim_captures_counted())
        return false;
    if (shim_device_cuda(d)->sync() != 0)
        return false;
    shim_device_count(d, SHIM_DEV_vmm_syncs, 1);
    shim_vmm_drain(d->vmm);
    return true;
}

/* Gives back [addr, addr + size) of a VMM segment, now or, while the
 * device cannot be waited for, at the next chance. */
static void vmm_give_back(shim_device *d, uintptr_t addr, size_t size)
{
    if (vmm_settle(d))
        shim_vmm_unmap(d->vmm, addr, size);
    else if (shim_vmm_defer(d->vmm, addr, size))
        shim_log(SHIM_LOG_ERROR, "device %d: out of host memory; %zu bytes "
                 "at %#lx stay mapped", d->id, size, (unsigned long)addr);
}

static void be_release(void *ctx, uintptr_t base, size_t size)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    atomic_fetch_sub(&d->reserved, size);
    shim_owner_clear(base, size, d->id, (int)(sh - d->shards));
    /* Stamped before the driver may hand the range out again. */
    shim_trace_put(sh->ring, true, TRACE_RELEASE, TRACE_R_OK, d->id, base, size);
    if (d->vmm) {
        vmm_give_back(d, base, size);
        return;
    }
    int e = shim_device_cuda(d)->mem_free(base);
    if (e)
        shim_log(SHIM_LOG_WARN, "device %d: %s of a %zu-byte segment "
                 "failed: %s", d->id, shim_device_cuda(d) == &shim_cuda_driver ? "cuMemFree" : "cudaFree", size,
                 shim_device_cuda(d)->strerror(e));
}

/* Part of a VMM segment, given back only when the device can be waited
 * for now: a trim is optional, and the pool keeps the range if it fails. */
static int be_trim(void *ctx, uintptr_t addr, size_t size)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    if (!vmm_settle(d))
        return -EAGAIN;
    atomic_fetch_sub(&d->reserved, size);
    shim_owner_clear(addr, size, d->id, (int)(sh - d->shards));
    shim_trace_put(sh->ring, true, TRACE_RELEASE, TRACE_R_OK, d->id, addr, size);
    shim_vmm_unmap(d->vmm, addr, size);
    return 0;
}

/* A stitched range: the granules behind parts, mapped again. No memory is
 * reserved, so neither the cap nor the trace sees it. */
static int be_stitch(void *ctx, const pool_span *parts, size_t n, uintptr_t *base)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    int err = shim_vmm_stitch(d->vmm, parts, n, base);
    if (!err)
        shim_owner_set(*base, pool_spans_size(parts, n), d->id, (int)(sh - d->shards));
    return err;
}

static int be_extend(void *ctx, uintptr_t base, size_t size,
                     const pool_span *parts, size_t n)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    int err = shim_vmm_extend(d->vmm, base, size, parts, n);
    if (!err)
        shim_owner_set(base + size, pool_spans_size(parts, n), d->id,
                       (int)(sh - d->shards));
    return err;
}

/* Stitched ranges whose unmapping waits for the device: past this many,
 * the next unstitch waits for it (the addresses, not memory, pile up). */
enum { STITCH_DEFERRED_MAX = 64 };

/* Work queued before the blocks of a stitched range were freed may still
 * use its addresses (a fence orders new work after it; it does not wait):
 * the range is unmapped once the device has been waited for. */
static void be_unstitch(void *ctx, uintptr_t base, size_t size)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    shim_owner_clear(base, size, d->id, (int)(sh - d->shards));
    if (shim_vmm_defer(d->vmm, base, size) != 0) {
        vmm_give_back(d, base, size);
        return;
    }
    if (shim_vmm_deferred(d->vmm) > STITCH_DEFERRED_MAX)
        vmm_settle(d);
}

/* The pool's observer: its allocations and frees, in lock order, for the
 * trace and for the streams fences may leave out (comm.h). */
static void be_observe(void *ctx, int ev, int err, uintptr_t addr, size_t size)
{
    shim_shard *sh = ctx;
    if (ev == POOL_EV_ALLOC) {
        shim_comm_allocated(addr);
        shim_trace_put(sh->ring, false, TRACE_ALLOC, TRACE_R_OK, sh->id, addr, size);
    } else if (ev == POOL_EV_CAP) {
        shim_trace_put(sh->ring, true, TRACE_RESERVE, TRACE_R_CAP, sh->id, 0, size);
    } else {
        if (!err)
            shim_comm_freed(addr, size);
        shim_trace_put(sh->ring, false, TRACE_FREE, err ? TRACE_R_BADFREE : TRACE_R_OK,
                       sh->id, addr, 0);
    }
}

/* ---- pools ----------------------------------------------------------------
 * Each device has up to CUPOOL_SHARDS pools. Shard 0 serves every large
 * request; small requests (CUPOOL_SMALL_MAX or less) go to the calling
 * thread's shard, assigned round robin at its first allocation, so threads
 * allocating small blocks do not queue on one lock. The cap is the
 * device's budget, which every shard's pool takes from (pool/budget.h).
 * Pools are never freed (a device reset empties them in place): other
 * threads may hold them. */

static _Thread_local int my_shard = -1;
static atomic_uint next_shard;

enum { HOLD_MS = 200 };

/* Runs the trace's final drain of a shard's ring (recorder.h) under the
 * lock its records are written under: the pool's, or, while the shard has
 * no pool yet, create_lock, which its creation holds. A lock held past
 * HOLD_MS (a thread waiting in the driver; exit called from a signal
 * handler that interrupted the pool) is not waited for. */
static void shard_hold(void *ctx, shim_trace_ring *r, void (*drain)(shim_trace_ring *))
{
    shim_shard *sh = ctx;
    _Atomic(pool *) *slot = &sh->dev->pools[sh - sh->dev->shards];
    pool *p = atomic_load_explicit(slot, memory_order_acquire);
    if (!p) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += HOLD_MS * 1000000L;
        t.tv_sec += t.tv_nsec / 1000000000L;
        t.tv_nsec %= 1000000000L;
        if (pthread_mutex_timedlock(&create_lock, &t) == 0) {
            p = atomic_load_explicit(slot, memory_order_acquire);
            if (!p)
                drain(r);
            pthread_mutex_unlock(&create_lock);
            if (!p)
                return;
        }
    }
    bool held = p && pool_hold(p, HOLD_MS);
    drain(r);
    if (held)
        pool_let_go(p);
}

/* The device's first pool: its api, its cap and the context it serves. */
static void device_first(shim_device *d)
{
    /* The runtime's calls if the process has one (they make its context),
     * else the driver's, in the caller's context. */
    shim_device_api(d->id);
    size_t free_b = 0, total = 0;
    shim_device_mem_info(d->id, &free_b, &total);
    shim_cap_set(d->id, total);
    CUcontext c = NULL;
    if (shim_drv_resolve() == 0 && shim_drv.cuCtxGetCurrent(&c) == CUDA_SUCCESS && c)
        atomic_store(&d->ctx, c);
}

/* CUPOOL_VMM or CUPOOL_STITCH: the device's VMM segments, tried once. */
static void vmm_setup(shim_device *d, const pool_config *pc, uint64_t cap)
{
    if (d->vmm_tried)
        return;
    d->vmm_tried = true;
    bool stitch = shim_stitch_wanted(&shim_cfg, shim_env);
    if (!shim_cfg.vmm && !stitch)
        return;
    /* Stitching without a cap: large units, a fraction of the mappings.
     * Under a cap: the granule, so that trims and stitches reach every
     * free granule (memory is what runs out there). */
    size_t unit = shim_cfg.vmm_unit ? shim_cfg.vmm_unit
                  : stitch && !cap ? POOL_STITCH_UNIT : 0;
    shim_vmm *v = shim_vmm_open(d->id, unit);
    size_t u = v ? shim_vmm_granule(v) : 0;
    if (v && (pc->small_segment % u || pc->large_round % u || pc->mid_segment % u)) {
        shim_log(SHIM_LOG_ERROR, "CUPOOL_VMM: CUPOOL_SMALL_SEGMENT, "
                 "CUPOOL_MID_SEGMENT and CUPOOL_LARGE_ROUND must be multiples of the device's "
                 "granularity (%zu bytes); using cudaMalloc'd segments", u);
    } else {
        d->vmm = v;
        d->stitch = v && stitch;
    }
}

/* The backend of shard sh's pool: what the options and the device ask. */
static pool_backend backend_of(shim_device *d, shim_shard *sh, bool tracing)
{
    bool poll = shim_cfg.fence == SHIM_FENCE_POLL, stitch = d->stitch;
    return (pool_backend){
        .reserve = be_reserve, .release = be_release,
        .fence = shim_cfg.fence == SHIM_FENCE_NONE ? NULL : shim_fence_full,
        .fence_begin = poll ? shim_fence_begin : NULL,
        .fence_poll = poll ? shim_fence_poll : NULL,
        .observe = tracing || (poll && shim_cfg.cupti != SHIM_OFF) ? be_observe : NULL,
        .trim = d->vmm ? be_trim : NULL,
        .trim_unit = d->vmm ? shim_vmm_unit(d->vmm) : 0,
        .stitch = stitch ? be_stitch : NULL,
        .unstitch = stitch ? be_unstitch : NULL,
        .extend = stitch ? be_extend : NULL,
        .ctx = sh};
}

/* One line at the device's first pool: its cap, fence and segments. */
static void say_ready(const shim_device *d, uint64_t cap)
{
    char c[32];
    bool poll = shim_cfg.fence == SHIM_FENCE_POLL;
    shim_log(SHIM_LOG_INFO, "device %d: pool ready, cap %s, fence %s%s, "
             "%zu shards, %s segments", d->id,
             cap ? stats_fmt_bytes(cap, c, sizeof(c)) : "none",
             shim_cfg.fence == SHIM_FENCE_BARRIER ? "barrier"
             : poll ? "poll"
             : shim_cfg.fence == SHIM_FENCE_SYNC  ? "sync" : "none",
             shim_work_watching() ? " (skipped while CUPTI sees no new work)"
             : poll && shim_cfg.cupti == SHIM_AUTO ? " (CUPTI once fences come after NCCL's)"
                                                          : "",
             shim_cfg.shards, d->stitch ? "stitched VMM"
             : d->vmm ? "VMM" : shim_device_cuda(d) == &shim_cuda_driver ? "cuMemAlloc'd"
                                                                           : "cudaMalloc'd");
}

static pool *create_locked(shim_device *d, int shard)
{
    pool_config pc = shim_cfg.pool;
    if (shard == 0)
        device_first(d);
    uint64_t cap = shim_cap_limit(d->id); /* known: shard 0 set it */
    vmm_setup(d, &pc, cap);
    shim_work_watch(); /* before any block is handed out */
    /* The device's cap spans its shards and the memory passed on. */
    pc.max_reserved = 0;
    pc.budget = &d->budget;
    pc.release_threshold = shim_cfg.release_threshold;
    shim_shard *sh = &d->shards[shard];
    sh->dev = d;
    sh->id = d->id;
    bool tracing = shim_tracing();
    if (tracing && !sh->ring)
        sh->ring = shim_trace_ring_new(shard_hold, sh);
    pool_backend be = backend_of(d, sh, tracing);
    pool *p = NULL;
    int err = pool_create(&pc, &be, &p);
    if (err) {
        shim_log(SHIM_LOG_ERROR, "device %d: cannot create a pool (%s); "
                 "passing allocations through", d->id, pool_strerror(err));
        return NULL;
    }
    if (shard == 0)
        say_ready(d, cap);
    return p;
}

pool *shim_device_shard(int dev, int shard)
{
    shim_device *d = &shim_devices[dev];
    pool *p = atomic_load_explicit(&d->pools[shard], memory_order_acquire);
    if (p)
        return p;
    if (shard != 0 && !shim_device_shard(dev, 0))
        return NULL; /* shard 0 first: it sets the device's cap */
    pthread_mutex_lock(&create_lock);
    p = atomic_load_explicit(&d->pools[shard], memory_order_acquire);
    if (!p) {
        p = create_locked(d, shard);
        atomic_store_explicit(&d->pools[shard], p, memory_order_release);
    }
    pthread_mutex_unlock(&create_lock);
    shim_first_pool(); /* starts the helper thread (control.c) */
    return p;
}

static int thread_shard(void)
{
    if (my_shard < 0)
        my_shard = (int)(atomic_fetch_add(&next_shard, 1) % shim_cfg.shards);
    return my_shard;
}

int shim_device_alloc(int dev, size_t size, uintptr_t *addr)
{
    pool *p = shim_device_shard(dev, size <= shim_cfg.pool.small_max ? thread_shard() : 0);
    if (!p)
        return -ENODEV;
    /* The pool retries once after releasing its own idle segments; the
     * caller reclaims more (cap.h). */
    return pool_alloc(p, size, addr);
}

/* pool_free in the shard the owner hint names, if any: -ENOENT if there
 * is none or it does not own addr. */
static int free_hinted(uintptr_t addr, int *dev, int *shard)
{
    if (shim_owner_hint(addr, dev, shard) != 0)
        return -ENOENT;
    pool *p = shim_device_shard_if_any(*dev, *shard);
    return p ? pool_free(p, addr) : -ENOENT;
}

/* pool_free in each shard of dev but skip, the calling thread's first. */
static int free_probing(int dev, uintptr_t addr, int skip)
{
    int mine = thread_shard(), err = -ENOENT;
    for (size_t k = 0; err == -ENOENT && k < shim_cfg.shards; k++) {
        int s = k == 0 ? mine : (int)k == mine ? 0 : (int)k;
        pool *p = s == skip ? NULL : shim_device_shard_if_any(dev, s);
        if (p)
            err = pool_free(p, addr);
    }
    return err;
}

int shim_device_free(int guess, uintptr_t addr)
{
    int hd = -1, hs = -1;
    int err = free_hinted(addr, &hd, &hs);
    if (err == -ENOENT && guess >= 0)
        err = free_probing(guess, addr, hd == guess ? hs : -1);
    for (int i = 0; err == -ENOENT && i < SHIM_MAX_DEVICES; i++)
        if (i != guess && shim_device_shard_if_any(i, 0))
            err = free_probing(i, addr, hd == i ? hs : -1);
    return err;
}

/* The shard of device dev whose segments hold addr, or NULL. */
static pool *shard_holding(int dev, uintptr_t addr)
{
    for (size_t s = 0; s < shim_cfg.shards; s++) {
        pool *p = shim_device_shard_if_any(dev, (int)s);
        if (p && pool_owns(p, addr))
            return p;
    }
    return NULL;
}

int shim_device_segment_of(int dev, uintptr_t addr, uintptr_t *base, size_t *size)
{
    pool *p = shard_holding(dev, addr);
    return p ? pool_segment_of(p, addr, base, size) : -ENOENT;
}

int shim_device_block_of(int dev, uintptr_t addr, pool_span *block, uint64_t *born)
{
    pool *p = shard_holding(dev, addr);
    return p ? pool_block_of(p, addr, block, born) : -ENOENT;
}

void shim_device_peer_access(int owner, int peer)
{
    if (owner < 0 || owner >= SHIM_MAX_DEVICES || !shim_cfg.shards)
        return;
    shim_vmm_peer_note(owner, peer);
    /* With a pool published, the device's VMM choice is made and seen. */
    for (size_t s = 0; s < shim_cfg.shards; s++) {
        if (shim_device_shard_if_any(owner, (int)s)) {
            if (shim_devices[owner].vmm)
                shim_vmm_grant(shim_devices[owner].vmm);
            return;
        }
    }
}

void shim_device_abandon(int dev)
{
    shim_device *d = &shim_devices[dev];
    /* Emptied in place, never freed: the helper thread and other threads
     * may hold the pools. */
    for (size_t s = 0; s < shim_cfg.shards; s++) {
        pool *p = shim_device_shard_if_any(dev, (int)s);
        if (p)
            pool_forget(p);
    }
    atomic_store(&d->reserved, 0);
    atomic_store(&d->ctx, NULL); /* the next one to allocate says which */
    pthread_mutex_lock(&d->lock);
    /* The reset destroyed the device's streams and events too: comm.h
     * forgets them (their handles may come back for other streams). */
    for (size_t i = 0; i < d->nstreams; i++)
        if (d->streams[i].nonblocking)
            shim_comm_forget(d->streams[i].stream);
    d->nstreams = d->nnb = d->neager = 0;
    d->legacy_event = NULL;
    for (size_t i = 0; i < d->nfences; i++)
        free(d->fences[i].events);
    d->nfences = 0;
    d->nspare = 0;
    d->norphans = 0;
    pthread_mutex_lock(&d->order_lock);
    d->order_event = NULL;
    pthread_mutex_unlock(&d->order_lock);
    d->tickets_done = d->tickets;
    pthread_mutex_unlock(&d->lock);
}

uint64_t shim_device_flush_all(void)
{
    uint64_t total = 0;
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        shim_device *d = &shim_devices[i];
        shim_saved saved;
        if (!shim_device_shard_if_any(i, 0) || !enter(d, &saved))
            continue;
        uint64_t n = shim_device_flush(i);
        leave(d, &saved);
        shim_trace_event(TRACE_FLUSH, TRACE_R_OK, i, 0, n);
        total += n;
    }
    return total;
}

bool shim_device_owns(void *ptr)
{
    int hd, hs;
    if (shim_owner_hint((uintptr_t)ptr, &hd, &hs) == 0) {
        pool *p = shim_device_shard_if_any(hd, hs);
        if (p && pool_owns(p, (uintptr_t)ptr) == 1)
            return true;
    }
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        if (!shim_device_shard_if_any(i, 0))
            continue;
        for (size_t s = 0; s < shim_cfg.shards; s++) {
            pool *p = shim_device_shard_if_any(i, (int)s);
            if (p && pool_owns(p, (uintptr_t)ptr) == 1)
                return true;
        }
    }
    return false;
}
