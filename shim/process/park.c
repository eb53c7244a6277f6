/* SPDX-License-Identifier: Apache-2.0 */
/*
 * park.c - see park.h.
 *
 * The bytes of every device's VMM segments are laid end to end in host
 * memory: chunks of CHUNK pinned bytes (chunk_pin), kept from one pause
 * to the next, so that only the first pays for pinning. An item is
 * the part of a span (adjacent pieces of a segment) inside one chunk.
 * THREADS threads take a chunk each in turn, pin it if it is new, and copy
 * its items on a stream of their own per device, through the driver alone:
 * the program's threads are stopped at CUPTI's entry callback, where the
 * runtime may hold its own locks. Helper thread only, but the copies.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>

#include "capture.h"
#include "cudagate.h"
#include "cupti.h"
#include "devstate.h"
#include "driver.h"
#include "log.h"
#include "park.h"
#include "process.h"
#include "vmm_park.h"

enum { THREADS = 8, SETTLE_MS = 50 };
#define CHUNK ((size_t)256 << 20)

typedef struct item {
    int dev;
    uintptr_t addr;
    size_t size, host; /* host: its offset in the chunks laid end to end */
} item;

/* What is parked: written by the helper, read by the copy threads while
 * it waits for them. */
static item *items;
static size_t nitems, items_cap;
static void **chunks; /* pinned, CHUNK bytes each; kept */
static size_t nchunks;
static bool parked;
static stats_park last;

bool shim_park_parked(void)
{
    return parked;
}

void shim_park_view(stats_park *p)
{
    *p = last;
    p->state = parked ? STATS_PARK_PARKED : STATS_PARK_RUNNING;
    p->host = (uint64_t)nchunks * CHUNK;
}

static uint32_t us_since(uint64_t t0)
{
    uint64_t us = (shim_mono_ns() - t0) / 1000u;
    return us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

/* Refuses or fails with err and why: 'err'. */
static int said(int err, const char *fmt, const char *arg)
{
    last.error = err;
    snprintf(last.why, sizeof(last.why), fmt, arg);
    return err;
}

/* The context of device d's pools: the one recorded, else its primary
 * context (the runtime's), retained once and kept. */
static CUcontext ctx_of(int d)
{
    static _Atomic(CUcontext) primary[SHIM_MAX_DEVICES];
    CUcontext c = shim_device_ctx(d);
    if (c || (c = atomic_load(&primary[d])))
        return c;
    CUdevice dev;
    if (shim_drv.cuDeviceGet(&dev, d) == CUDA_SUCCESS &&
        shim_drv.cuDevicePrimaryCtxRetain(&c, dev) == CUDA_SUCCESS) {
        CUcontext none = NULL;
        if (!atomic_compare_exchange_strong(&primary[d], &none, c))
            shim_drv.cuDevicePrimaryCtxRelease_v2(dev); /* another thread's came first */
        return atomic_load(&primary[d]);
    }
    return NULL;
}

/* ---- what moves ------------------------------------------------------------ */

static bool item_add(int dev, uintptr_t addr, size_t size, size_t host)
{
    if (nitems == items_cap) {
        size_t cap = items_cap ? 2 * items_cap : 256;
        item *n = realloc(items, cap * sizeof(*n));
        if (!n)
            return false;
        items = n;
        items_cap = cap;
    }
    items[nitems++] = (item){dev, addr, size, host};
    return true;
}

/* Cuts dev's spans into items at chunk boundaries, from host offset *at. */
static int plan_device(int dev, shim_vmm *v, uint64_t *at)
{
    size_t n = shim_vmm_spans(v, NULL, 0);
    pool_span *s = n ? malloc(n * sizeof(*s)) : NULL;
    if (n && (!s || shim_vmm_spans(v, s, n) != n)) { /* no growth: the gate is closed */
        free(s);
        return -ENOMEM;
    }
    for (size_t k = 0; k < n; k++)
        for (size_t off = 0; off < s[k].size;) {
            size_t room = CHUNK - *at % CHUNK, len = s[k].size - off;
            len = len < room ? len : room;
            if (!item_add(dev, s[k].addr + off, len, *at)) {
                free(s);
                return -ENOMEM;
            }
            off += len;
            *at += len;
        }
    free(s);
    return 0;
}

/* Plans every device's items; *total their bytes, *any whether a device
 * has VMM segments. */
static int plan(uint64_t *total, bool *any)
{
    nitems = 0;
    *total = 0;
    *any = false;
    for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
        shim_vmm *v = shim_device_shard_if_any(d, 0) ? shim_device_vmm(d) : NULL;
        if (!v)
            continue;
        *any = true;
        int err = plan_device(d, v, total);
        if (err)
            return err;
    }
    size_t need = (size_t)((*total + CHUNK - 1) / CHUNK);
    if (need > nchunks) {
        void **c = realloc(chunks, need * sizeof(*c));
        if (!c)
            return -ENOMEM;
        memset(c + nchunks, 0, (need - nchunks) * sizeof(*c));
        chunks = c;
        nchunks = need;
    }
    return 0;
}

/* ---- the copies -------------------------------------------------------------- */

typedef struct copy_job {
    bool out;
    uint64_t devs;            /* the devices whose items move (a bit each) */
    size_t nused;             /* chunks holding items */
    atomic_size_t next;       /* the next chunk to take */
    atomic_int err;           /* the first failure's CUresult */
    _Atomic uint64_t pin_ns;  /* summed over the threads */
    size_t chunk;             /* where err came, written by who set it */
    /* Out: how far each device's bytes are copied (vmm_park.h), the
     * chunks copied, the run of them from the first (front, and its first
     * item), the strays when the copies began, whether one ended since,
     * and when the last chunk was copied; under front_lock. In: each
     * device's memory as it is backed again, and the threads with copies
     * into it in flight (a failing unpark waits for none: drain). */
    shim_vmm_watch watch[SHIM_MAX_DEVICES];
    pthread_mutex_t front_lock;
    bool *copied;
    size_t front, front_item;
    uint64_t strays;
    bool early; /* ready published chunk by chunk (else all at once) */
    bool stray;
    uint64_t done_ns;
    atomic_uint inflight[SHIM_MAX_DEVICES];
} copy_job;

/* Out: the copies failed; no device's memory may go. */
static void copies_failed(copy_job *j)
{
    for (int d = 0; d < SHIM_MAX_DEVICES; d++)
        atomic_store(&j->watch[d].failed, true);
}

/* Out: chunk c is copied. Each device's watch learns how far the run of
 * copied chunks from the first reaches on it (when early: no call can be
 * inside the driver unseen); once every chunk is, the memory may go
 * (ready: UINTPTR_MAX), unless a CUDA call begun before cupool watched the
 * calls ended meanwhile (its work may not have been waited for, and may
 * touch any piece: every watch fails, nothing having been unmapped). */
static void chunk_copied(copy_job *j, size_t c)
{
    pthread_mutex_lock(&j->front_lock);
    j->copied[c] = true;
    while (j->front < j->nused && j->copied[j->front]) {
        for (; j->front_item < nitems && items[j->front_item].host / CHUNK == j->front;
             j->front_item++) {
            const item *it = &items[j->front_item];
            if (j->early)
                atomic_store(&j->watch[it->dev].ready, it->addr + it->size);
        }
        j->front++;
    }
    if (j->front == j->nused && !j->done_ns) {
        j->done_ns = shim_mono_ns();
        j->stray = shim_cudagate_strays() != j->strays;
        for (int d = 0; d < SHIM_MAX_DEVICES && !j->stray; d++)
            atomic_store(&j->watch[d].ready, UINTPTR_MAX);
        if (j->stray)
            copies_failed(j);
    }
    pthread_mutex_unlock(&j->front_lock);
}

/* Waits for this thread's copies on every device; no longer counted in
 * flight. The first failure. */
static CUresult streams_sync(copy_job *j, CUstream *streams, bool *counted)
{
    CUresult e = CUDA_SUCCESS;
    for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
        CUresult s = CUDA_SUCCESS;
        if (streams[d]) { /* a stream names its context: synchronized even if this fails */
            shim_drv.cuCtxSetCurrent(ctx_of(d));
            s = shim_drv.cuStreamSynchronize(streams[d]);
        }
        e = e == CUDA_SUCCESS ? s : e;
        if (counted[d])
            atomic_fetch_sub(&j->inflight[d], 1);
        counted[d] = false;
    }
    return e;
}

/* In: whether item it may be copied now, its memory backed; false when its
 * device's unpark failed (its bytes stay in host memory). The thread counts
 * itself in flight on the device before it looks (so a failing unpark sees
 * it and waits), and waits for the memory with nothing in flight (so that
 * no unpark waits for it). */
static bool backed(copy_job *j, const item *it, CUstream *streams, bool *counted,
                   CUresult *e)
{
    shim_vmm_watch *w = &j->watch[it->dev];
    for (;;) {
        if (!counted[it->dev])
            atomic_fetch_add(&j->inflight[it->dev], 1);
        counted[it->dev] = true;
        if (atomic_load(&w->failed))
            return false;
        if (atomic_load(&w->ready) >= it->addr + it->size)
            return true;
        CUresult s = streams_sync(j, streams, counted);
        *e = *e == CUDA_SUCCESS ? s : *e;
        nanosleep(&(struct timespec){0, 20000L}, NULL);
    }
}

/* Copies the items of chunk c on this thread's streams (one per device,
 * made on first use); in, each once its memory is backed. */
static CUresult copy_chunk(copy_job *j, size_t c, CUstream *streams)
{
    size_t k = 0;
    bool counted[SHIM_MAX_DEVICES] = {0};
    while (k < nitems && items[k].host / CHUNK < c) /* items are in host order */
        k++;
    CUresult e = CUDA_SUCCESS;
    for (; e == CUDA_SUCCESS && k < nitems && items[k].host / CHUNK == c; k++) {
        const item *it = &items[k];
        if (!(j->devs >> it->dev & 1) ||
            (!j->out && (!backed(j, it, streams, counted, &e) || e != CUDA_SUCCESS)))
            continue;
        e = shim_drv.cuCtxSetCurrent(ctx_of(it->dev));
        if (e == CUDA_SUCCESS && !streams[it->dev])
            e = shim_drv.cuStreamCreate(&streams[it->dev], CU_STREAM_NON_BLOCKING);
        char *h = (char *)chunks[c] + it->host % CHUNK;
        if (e == CUDA_SUCCESS)
            e = j->out ? shim_drv.cuMemcpyDtoHAsync_v2(h, it->addr, it->size, streams[it->dev])
                       : shim_drv.cuMemcpyHtoDAsync_v2(it->addr, h, it->size, streams[it->dev]);
    }
    CUresult s = streams_sync(j, streams, counted);
    return e == CUDA_SUCCESS ? s : e;
}

/* A chunk of pinned host memory, for every context (any device's items
 * fit): mapped with transparent huge pages, touched, then registered.
 * Measured on the H200 host, 8 GiB on 8 threads: 26 GiB/s this way,
 * 1.9 GiB/s through cuMemHostAlloc (which pins 4 KiB pages). */
static CUresult chunk_pin(void **out)
{
    void *p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    madvise(p, CHUNK, MADV_HUGEPAGE); /* a hint: 4 KiB pages where refused */
    memset(p, 0, CHUNK);
    CUresult e = shim_drv.cuCtxSetCurrent(ctx_of(items[0].dev));
    if (e == CUDA_SUCCESS)
        e = shim_drv.cuMemHostRegister_v2(p, CHUNK, CU_MEMHOSTREGISTER_PORTABLE);
    if (e != CUDA_SUCCESS) {
        munmap(p, CHUNK);
        return e == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED ? CUDA_ERROR_UNKNOWN : e;
    }
    *out = p;
    return CUDA_SUCCESS;
}

static void *copier(void *arg)
{
    copy_job *j = arg;
    CUstream streams[SHIM_MAX_DEVICES] = {0};
    shim_cudagate_exempt(true);
    for (;;) {
        size_t c = atomic_fetch_add(&j->next, 1);
        if (c >= j->nused || atomic_load(&j->err))
            break;
        CUresult e = CUDA_SUCCESS;
        if (!chunks[c]) {
            uint64_t t0 = shim_mono_ns();
            e = chunk_pin(&chunks[c]);
            atomic_fetch_add(&j->pin_ns, shim_mono_ns() - t0);
        }
        if (e == CUDA_SUCCESS)
            e = copy_chunk(j, c, streams);
        int none = 0;
        if (e != CUDA_SUCCESS && atomic_compare_exchange_strong(&j->err, &none, (int)e))
            j->chunk = c; /* the first failure's */
        if (j->out && e == CUDA_SUCCESS)
            chunk_copied(j, c);
        else if (j->out)
            copies_failed(j);
    }
    for (int d = 0; d < SHIM_MAX_DEVICES; d++)
        if (streams[d] && shim_drv.cuCtxSetCurrent(ctx_of(d)) == CUDA_SUCCESS)
            shim_drv.cuStreamDestroy_v2(streams[d]);
    return NULL;
}

/* The copy threads at work. */
typedef struct copiers {
    copy_job j;
    pthread_t t[THREADS];
    int started;
} copiers;

/* A failing unpark of device (arg - c->j.inflight)'s memory waits until no
 * copy into it is in flight. */
static void drain(void *arg)
{
    atomic_uint *n = arg;
    while (atomic_load(n))
        nanosleep(&(struct timespec){0, 20000L}, NULL);
}

/* Starts copying the items of devs out (to host) or in, on THREADS
 * threads: out, c->j.watch[dev] tells the caller how far each device's
 * bytes are copied, chunk by chunk if early, else once all are (strays:
 * shim_cudagate_strays() before the copies); in, each device's items wait
 * for it (the caller backs the memory meanwhile). */
static void copy_begin(copiers *c, bool out, uint64_t devs, uint64_t total, uint64_t strays,
                       bool early)
{
    copy_job *j = &c->j;
    *j = (copy_job){.out = out, .devs = devs, .nused = (size_t)((total + CHUNK - 1) / CHUNK),
                    .strays = strays, .early = early};
    atomic_init(&j->next, 0);
    atomic_init(&j->err, 0);
    atomic_init(&j->pin_ns, 0);
    pthread_mutex_init(&j->front_lock, NULL);
    for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
        atomic_init(&j->inflight[d], 0);
        atomic_init(&j->watch[d].ready, 0);
        atomic_init(&j->watch[d].failed, false);
        j->watch[d].drain = drain;
        j->watch[d].arg = &j->inflight[d];
    }
    c->started = 0;
    if (out && !(j->copied = calloc(j->nused + 1, sizeof(*j->copied)))) {
        atomic_store(&j->err, (int)CUDA_ERROR_OUT_OF_MEMORY);
        copies_failed(j);
        return;
    }
    if (out && !j->nused)
        chunk_copied(j, 0); /* nothing to copy: done */
    for (; c->started < THREADS && (size_t)c->started < j->nused; c->started++)
        if (pthread_create(&c->t[c->started], NULL, copier, j) != 0)
            break;
    if (out && !c->started && j->nused)
        copier(j); /* no thread: this one alone, before the memory may go */
}

/* Waits for the copies (makes them here if no thread started): 0 or the
 * first CUresult that failed. */
static int copy_end(copiers *c)
{
    copy_job *j = &c->j;
    if (!j->out && !c->started && j->nused)
        copier(j); /* no thread: this one alone, the memory backed */
    for (int i = 0; i < c->started; i++)
        pthread_join(c->t[i], NULL);
    free(j->copied);
    pthread_mutex_destroy(&j->front_lock);
    last.pin_us = (uint32_t)(atomic_load(&j->pin_ns) / 1000u);
    last.streams = (uint32_t)(c->started ? c->started : 1);
    int e = atomic_load(&j->err);
    const char *s = NULL;
    if (e && shim_drv.cuGetErrorString((CUresult)e, &s) == CUDA_SUCCESS && s)
        shim_log(SHIM_LOG_WARN, "pause: copying chunk %zu %s failed: %s", j->chunk,
                 j->out ? "out" : "in", s);
    return e;
}

/* ---- the devices' work ------------------------------------------------------- */

/* Waits for the work of every device with a pool, through the driver.
 * 0, or 1 with why said. */
static int devices_sync(void)
{
    CUcontext saved = NULL;
    shim_drv.cuCtxGetCurrent(&saved);
    int err = 0;
    for (int d = 0; d < SHIM_MAX_DEVICES && !err; d++) {
        CUcontext c = shim_device_shard_if_any(d, 0) ? ctx_of(d) : NULL;
        CUresult e = c ? shim_drv.cuCtxSetCurrent(c) : CUDA_SUCCESS;
        if (c && e == CUDA_SUCCESS)
            e = shim_drv.cuCtxSynchronize();
        if (e != CUDA_SUCCESS) {
            char dev[16];
            snprintf(dev, sizeof(dev), "%d", d);
            err = said(-EIO, "device %s: its work could not be waited for", dev);
        }
    }
    shim_drv.cuCtxSetCurrent(saved);
    return err;
}

/* ---- out and back -------------------------------------------------------------- */

/* dev's VMM segments, if it has a pool. */
static shim_vmm *vmm_of(int d)
{
    return shim_device_shard_if_any(d, 0) ? shim_device_vmm(d) : NULL;
}

/* The devices' memory in use, as the driver tells (every process's). */
static uint64_t devices_used(void)
{
    CUcontext saved = NULL;
    shim_drv.cuCtxGetCurrent(&saved);
    uint64_t used = 0;
    for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
        size_t f = 0, t = 0;
        CUcontext c = vmm_of(d) ? ctx_of(d) : NULL;
        if (c && shim_drv.cuCtxSetCurrent(c) == CUDA_SUCCESS &&
            shim_drv.cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS)
            used += t - f;
    }
    shim_drv.cuCtxSetCurrent(saved);
    return used;
}

/* Stops the program's calls: 0 with the gate closed and no thread inside
 * a call, or the refusal with the gate open. *was_out: whether CUPTI watched
 * before. */
static int gate_close(bool *was_out)
{
    const char *why;
    bool was = shim_work_watching();
    *was_out = was;
    /* Refused before CUPTI starts where it can be: the driver will not
     * checkpoint a process CUPTI watches, so the driver's own path is
     * gone once it has started. */
    if (shim_captures_open())
        return said(-EBUSY, "%sa CUDA graph capture is under way: nothing moved", "");
    if (!shim_work_watch_gate(&why))
        return said(-ENOTSUP, "%s", why);
    if (!was) /* calls begun before CUPTI watched are not counted: let them end */
        nanosleep(&(struct timespec){0, SETTLE_MS * 1000000L}, NULL);
    shim_cudagate_close();
    unsigned inside;
    uint64_t wait_ms = shim_cfg.pause_call_wait_ms;
    if (!shim_cudagate_quiet(wait_ms > UINT_MAX ? UINT_MAX : (unsigned)wait_ms, &inside)) {
        shim_cudagate_open();
        char busy[sizeof(last.why)];
        snprintf(busy, sizeof(busy), "%u of its threads stayed inside a CUDA call for %.3g s "
                 "(CUPOOL_PAUSE_CALL_WAIT: a long copy or kernel launch, a module load): "
                 "nothing moved", inside, (double)wait_ms / 1000.0);
        return said(-EBUSY, "%s", busy);
    }
    if (shim_captures_open()) { /* none begins now: its begin waits at the gate */
        shim_cudagate_open();
        return said(-EBUSY, "%sa CUDA graph capture is under way: nothing moved", "");
    }
    return 0;
}

/* Copies out every device's segments and releases their memory, the gate
 * closed (gate_close; watched_before: CUPTI watched before it). 0, or the
 * error with the gate open again. */
static int move_out(bool watched_before)
{
    uint64_t t0 = shim_mono_ns(), total = 0, all = 0;
    uint64_t strays = shim_cudagate_strays(); /* ended before the wait: its work waited for */
    bool any;
    int err = devices_sync();
    last.sync_us = us_since(t0);
    if (!err && (err = plan(&total, &any)) != 0)
        said(err, "%sno host memory to plan the copies", "");
    if (err)
        return err;
    for (int d = 0; d < SHIM_MAX_DEVICES; d++)
        all |= vmm_of(d) ? 1ull << d : 0;
    t0 = shim_mono_ns();
    static copiers c; /* the helper's alone */
    /* Pieces unmapped as their bytes are copied, unless CUPTI started for
     * this pause: a call begun before then may still queue work on any of
     * them, which the strays tell only once the copies are done. */
    copy_begin(&c, true, all, total, strays, watched_before);
    uint64_t released = 0;
    bool lost = false;
    for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
        uint64_t b = 0;
        int pe = vmm_of(d) ? shim_vmm_park(vmm_of(d), &b, &c.j.watch[d]) : -ENODEV;
        released += pe == 0 ? b : 0;
        lost |= pe == -EFAULT;
    }
    last.map_us = us_since(t0);
    int e = copy_end(&c);
    last.copy_us = c.j.done_ns ? (uint32_t)((c.j.done_ns - t0) / 1000u) : us_since(t0);
    if (lost)
        return said(-EIO, "%sthe copies failed, and part of its memory unmapped meanwhile "
                    "could not be mapped again: its next use of it faults", "");
    if (e)
        return said(e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO, "%s", e ==
                    CUDA_ERROR_OUT_OF_MEMORY ? "no pinned host memory for its bytes: "
                    "nothing released" : "a copy to host memory failed: nothing released");
    if (c.j.stray)
        return said(-EAGAIN, "%sa CUDA call begun before cupool watched the calls ended "
                    "during the copies: nothing released (pause again)", "");
    if (released != total)
        shim_log(SHIM_LOG_WARN, "pause: %lu of %lu bytes copied out were released",
                 (unsigned long)released, (unsigned long)total);
    last.moved = total;
    parked = true;
    last.left = devices_used();
    return 0;
}

static int park_out(void)
{
    if (parked)
        return said(-EALREADY, "%sit is parked already", "");
    bool any = false;
    for (int d = 0; d < SHIM_MAX_DEVICES; d++)
        any |= vmm_of(d) != NULL;
    if (!any)
        return said(-ENOTSUP, "%sno segment of its is VMM-backed (CUPOOL_VMM=1, or "
                    "--torch, makes them so)", "");
    uint64_t t0 = shim_mono_ns();
    shim_cudagate_exempt(true); /* until it is back */
    bool watched;
    int err = gate_close(&watched);
    last.gate_us = us_since(t0);
    if (!err && (err = move_out(watched)) != 0)
        shim_cudagate_open();
    if (err)
        shim_cudagate_exempt(false);
    return err;
}

/* Backs the parked devices' segments again and copies their bytes in, each
 * piece's as soon as it is backed: 0, or the error with what failed still
 * parked. */
static int park_in(void)
{
    if (!parked)
        return said(-EALREADY, "%sit is not parked", "");
    uint64_t t0 = shim_mono_ns(), devs = 0, back = 0, total = 0;
    int err = 0, failed = -1;
    for (int d = 0; d < SHIM_MAX_DEVICES; d++)
        devs |= vmm_of(d) && shim_vmm_parked(vmm_of(d)) ? 1ull << d : 0;
    for (size_t k = 0; k < nitems; k++)
        total = items[k].host + items[k].size;
    static copiers c; /* the helper's alone */
    copy_begin(&c, false, devs, total, 0, false);
    for (int d = 0; d < SHIM_MAX_DEVICES; d++) {
        if (!(devs >> d & 1))
            continue;
        if (err) /* not tried: its items wait in host memory */
            atomic_store(&c.j.watch[d].failed, true);
        else if (!(err = shim_vmm_unpark(vmm_of(d), &c.j.watch[d])))
            back |= 1ull << d;
        failed = err && failed < 0 ? d : failed;
    }
    last.map_us = us_since(t0);
    for (size_t k = 0; k < nitems; k++)
        last.moved += back >> items[k].dev & 1 ? items[k].size : 0;
    int e = copy_end(&c);
    last.copy_us = us_since(t0);
    for (int d = 0; e && d < SHIM_MAX_DEVICES; d++) { /* parked again: the bytes wait */
        uint64_t b;
        if (back >> d & 1)
            shim_vmm_park(vmm_of(d), &b, NULL);
    }
    char dev[16];
    snprintf(dev, sizeof(dev), "%d", failed);
    if (e)
        return said(-EIO, "%sa copy back to the device failed: it stays paused, its "
                    "bytes in host memory (cupool resume tries again)", "");
    if (err)
        return said(err, "device %s has no room for its memory (another process took "
                    "it?): it stays paused, its bytes in host memory (cupool resume "
                    "tries again)", dev);
    parked = false;
    shim_cudagate_open();
    shim_cudagate_exempt(false);
    return 0;
}

void shim_park_serve(bool out)
{
    memset(&last, 0, sizeof(last));
    int err = out ? park_out() : park_in();
    if (err)
        shim_log(SHIM_LOG_WARN, "pause: %s", last.why);
    else
        shim_log(SHIM_LOG_INFO, "pause: %s %.2f GiB in %.3f s (%u threads)",
                 out ? "moved out" : "brought back", (double)last.moved / (1 << 30),
                 (double)last.copy_us / 1e6, last.streams);
}
