/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ipc_vmm.c - see ipc_vmm.h.
 *
 * The exporter keeps its exports in its own memory (EXPORTS slots, each
 * with a random nonce), never on the live page, which other processes of
 * the user may write: only what this process exported is handed over. The
 * handle names the exporter's pid, its socket's token, the slot and the
 * nonce; the importer asks the exporter over its socket (handoff.h), which checks the slot's
 * nonce and that the block is still live, then sends the block's pieces a
 * batch at a time. The importer maps each batch as it comes.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "device.h"
#include "driver.h"
#include "grow.h"
#include "handoff.h"
#include "ipc_vmm.h"
#include "log.h"
#include "stats.h"
#include "vmm.h"

#define VMM_MAGIC "cupoolV\001"

typedef struct vmm_handle {
    char magic[8];
    int32_t pid;
    uint32_t slot;
    uint64_t nonce;
    uint64_t offset; /* the address's in its block */
    uint64_t token;  /* of the exporter's socket */
} vmm_handle;

_Static_assert(sizeof(vmm_handle) <= 64, "cupool's handle fits in CUDA's");

bool shim_ipc_vmm_handle(const void *h) { return !memcmp(h, VMM_MAGIC, 8); }

/* ---- the exporter ----------------------------------------------------------- */

typedef struct export {
    uint64_t nonce; /* 0: a free slot */
    uintptr_t start;
    size_t size;
    uint64_t born;  /* which allocation the block is (pool_block_of) */
    uint64_t offset;
    int dev;
} export;

enum { EXPORTS = 4096 };
static export exports[EXPORTS];
static unsigned next_slot; /* the slot to replace when none is free */
static pthread_mutex_t exports_lock = PTHREAD_MUTEX_INITIALIZER;

/* The slot and nonce of export e: those it had if exported before (so
 * that every handle of it stays good, as CUDA's do); else a free slot's,
 * else the next in turn (an importer of the export replaced gets a clear
 * error from the nonce, never another block). */
static void record(const export *e, uint32_t *slot, uint64_t *nonce)
{
    pthread_mutex_lock(&exports_lock);
    int at = -1, spare = -1;
    for (int i = 0; i < EXPORTS && at < 0; i++) {
        const export *x = &exports[i];
        if (x->nonce && x->start == e->start && x->size == e->size &&
            x->born == e->born && x->offset == e->offset && x->dev == e->dev)
            at = i;
        else if (!x->nonce && spare < 0)
            spare = i;
    }
    if (at < 0) {
        at = spare >= 0 ? spare : (int)(next_slot++ % EXPORTS);
        exports[at] = *e;
        exports[at].nonce = stats_nonce();
    }
    *slot = (uint32_t)at;
    *nonce = exports[at].nonce;
    pthread_mutex_unlock(&exports_lock);
}

/* The context of device dev made current on this thread, for the driver's
 * export calls (the handoff thread has none): the context to make current
 * again after, in *back. False if it cannot be. */
static bool enter_device(int dev, CUcontext *back)
{
    CUdevice d;
    CUcontext c;
    if (!shim_drv.cuCtxGetCurrent || shim_drv.cuCtxGetCurrent(back) != CUDA_SUCCESS ||
        shim_drv.cuDeviceGet(&d, dev) != CUDA_SUCCESS ||
        shim_drv.cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS)
        return false;
    if (shim_drv.cuCtxSetCurrent(c) == CUDA_SUCCESS)
        return true;
    shim_drv.cuDevicePrimaryCtxRelease_v2(d);
    return false;
}

static void leave_device(int dev, CUcontext back)
{
    CUdevice d;
    shim_drv.cuCtxSetCurrent(back);
    if (shim_drv.cuDeviceGet(&d, dev) == CUDA_SUCCESS)
        shim_drv.cuDevicePrimaryCtxRelease_v2(d);
}

/* Whether the block at start is still the allocation exported (freed
 * since, its pieces may hold other blocks now). */
static bool still_live(int dev, uintptr_t start, size_t size, uint64_t born)
{
    pool_span b;
    uint64_t now;
    return !shim_device_block_of(dev, start, &b, &now) && b.addr == start &&
           b.size == size && now == born;
}

/* The handoff's source: the layout of export (slot, nonce) while its
 * block is live; mine holds the device, the block's start, size and
 * allocation. */
static int layout(uint32_t slot, uint64_t nonce, shim_handoff_layout *l)
{
    export e = {0};
    pthread_mutex_lock(&exports_lock);
    if (slot < EXPORTS && nonce && exports[slot].nonce == nonce)
        e = exports[slot];
    pthread_mutex_unlock(&exports_lock);
    if (!e.nonce)
        return -ESTALE;
    if (!still_live(e.dev, e.start, e.size, e.born))
        return -ENOENT;
    size_t n, skip, span;
    int err = shim_vmm_layout(shim_device_vmm(e.dev), e.start, e.size, &n, &skip, &span);
    if (!err)
        *l = (shim_handoff_layout){n, skip + e.offset, span,
                                   {(uint64_t)e.dev, e.start, e.size, e.born}};
    return err;
}

/* Pieces k.. of export l, checked live again after: a block freed (and
 * its place given to another) while they were exported is not sent. */
static int pieces(const shim_handoff_layout *l, size_t k, shim_vmm_piece *p, size_t max,
                  size_t *got)
{
    int dev = (int)l->mine[0];
    CUcontext back;
    if (!enter_device(dev, &back))
        return -EIO;
    int err = shim_vmm_export(shim_device_vmm(dev), l->mine[1], l->mine[2], k, p, max, got);
    leave_device(dev, back);
    if (!err && !still_live(dev, l->mine[1], l->mine[2], l->mine[3])) {
        for (size_t i = 0; i < *got; i++)
            close(p[i].fd);
        *got = 0;
        err = -ENOENT;
    }
    return err;
}

static const shim_handoff_source source = {layout, pieces};

int shim_ipc_vmm_get(int dev, uintptr_t ptr, void *h)
{
    export e = {.dev = dev};
    uint64_t token = 0;
    pool_span b;
    int err = shim_device_block_of(dev, ptr, &b, &e.born);
    e.start = b.addr;
    e.size = b.size;
    if (!err)
        err = shim_handoff_serve(&source, &token);
    if (err) {
        shim_log(SHIM_LOG_ERROR, "IPC handle for %#lx: %s; refused", (unsigned long)ptr,
                 err == -EALREADY ? "the block is free" : "this process cannot hand "
                 "out memory of VMM segments (see the line before)");
        return cudaErrorInvalidValue;
    }
    e.offset = ptr - e.start;
    vmm_handle c = {.pid = (int32_t)getpid(), .offset = e.offset, .token = token};
    memcpy(c.magic, VMM_MAGIC, sizeof(c.magic));
    record(&e, &c.slot, &c.nonce);
    memset(h, 0, 64);
    memcpy(h, &c, sizeof(c));
    return 0;
}

/* ---- the importer ----------------------------------------------------------- */

/* A block mapped from another process, by its handle. */
typedef struct mapping {
    vmm_handle key;
    uintptr_t base, at; /* the pieces' range; the address handed out */
    size_t span, users;
    size_t *lens, n;    /* the pieces' lengths, for unmapping */
    CUcontext ctx;      /* current when it was opened */
} mapping;

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static mapping *maps;
static size_t nmaps, maps_cap;

/* The pieces as they come (the handoff's sink). */
typedef struct import {
    uintptr_t base;
    size_t span, skip, off, n, cap, *lens;
    bool begun;
} import;

static int begin(void *ctx, const shim_handoff_layout *l)
{
    import *im = ctx;
    im->lens = calloc(l->n, sizeof(*im->lens));
    if (!im->lens)
        return -ENOMEM;
    im->cap = l->n;
    im->span = l->span;
    im->skip = l->skip;
    int err = shim_vmm_import_begin(im->span, &im->base);
    im->begun = !err;
    return err;
}

static int take(void *ctx, size_t k, const shim_vmm_piece *p, size_t n)
{
    import *im = ctx;
    (void)k;
    for (size_t i = 0; i < n; i++) {
        if (im->n == im->cap || p[i].len > im->span - im->off)
            return -EPROTO; /* more than the layout said */
        int err = shim_vmm_import_piece(im->base, im->off, &p[i]);
        if (err)
            return err;
        im->lens[im->n++] = p[i].len;
        im->off += p[i].len;
    }
    return 0;
}

/* The mapping of handle key, or NULL. Needs maps_lock. */
static mapping *find_key(const vmm_handle *key)
{
    for (size_t i = 0; i < nmaps; i++)
        if (!memcmp(&maps[i].key, key, sizeof(*key)))
            return &maps[i];
    return NULL;
}

static const char *why(int err)
{
    return err == -ECONNREFUSED ? "that process does not answer (it ended?)"
           : err == -EPERM ? "what answers in its name is not that process of this "
                             "user; not asked"
           : err == -ESTALE ? "the block was exported again or the handle is old"
           : err == -ENOENT ? "the block is no longer there"
           : err == -ENOTSUP ? "its memory cannot be exported (see its log)"
           : strerror(-err);
}

/* Fetches and maps the block of handle c for the current device, outside
 * maps_lock (the exchange may take a while): 0 or a negative errno, with
 * nothing held on failure. */
static int fetch(const vmm_handle *c, void (*ready)(void), mapping *m)
{
    ready();
    CUdevice dev = -1;
    CUcontext ctx = NULL;
    if (shim_drv_resolve() != 0 || !shim_drv.cuCtxGetDevice ||
        shim_drv.cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 ||
        shim_drv.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
        return -ENODEV;
    import im = {0};
    shim_handoff_sink sink = {begin, take, &im};
    int err = shim_handoff_fetch(c->pid, c->token, c->slot, c->nonce, &sink);
    if (!err && im.off != im.span)
        err = -EPROTO;
    if (!err)
        err = shim_vmm_import_end(dev, im.base, im.span);
    if (err) {
        if (im.begun) /* nothing used it yet */
            shim_vmm_unimport(im.base, im.span, im.lens, im.n);
        free(im.lens);
        return err;
    }
    *m = (mapping){*c, im.base, im.base + im.skip, im.span, 1, im.lens, im.n, ctx};
    return 0;
}

int shim_ipc_vmm_open(const void *h, void (*ready)(void), void **ptr)
{
    vmm_handle c;
    memcpy(&c, h, sizeof(c));
    if (c.pid == (int32_t)getpid()) {
        shim_log(SHIM_LOG_ERROR, "opening an IPC handle in the process that made it: "
                 "refused, as CUDA refuses");
        return cudaErrorDeviceUninitialized;
    }
    if (!ptr)
        return cudaErrorInvalidValue;
    pthread_mutex_lock(&maps_lock);
    mapping *had = find_key(&c);
    if (had) {
        had->users++;
        *ptr = (void *)had->at;
    }
    pthread_mutex_unlock(&maps_lock);
    if (had)
        return cudaSuccess;
    mapping m;
    int err = fetch(&c, ready, &m);
    if (err) {
        shim_log(SHIM_LOG_ERROR, "opening an IPC handle: process %d's block in a VMM "
                 "segment: %s; nothing was mapped", (int)c.pid, why(err));
        return err == -ENOMEM ? cudaErrorMemoryAllocation : cudaErrorInvalidValue;
    }
    pthread_mutex_lock(&maps_lock);
    bool kept = false;
    if ((had = find_key(&c)) != NULL) { /* another thread mapped it meanwhile */
        had->users++;
        *ptr = (void *)had->at;
    } else if ((kept = pool_grow((void **)&maps, &maps_cap, nmaps, sizeof(*maps)))) {
        maps[nmaps++] = m;
        *ptr = (void *)m.at;
    }
    pthread_mutex_unlock(&maps_lock);
    if (!kept) {
        shim_vmm_unimport(m.base, m.span, m.lens, m.n); /* unused */
        free(m.lens);
    }
    return had || kept ? cudaSuccess : cudaErrorMemoryAllocation;
}

bool shim_ipc_vmm_close(void *ptr, int *err)
{
    mapping m = {0};
    bool found = false, last = false;
    pthread_mutex_lock(&maps_lock);
    for (size_t i = 0; i < nmaps && !found; i++) {
        if (maps[i].at != (uintptr_t)ptr)
            continue;
        found = true;
        if ((last = --maps[i].users == 0)) {
            m = maps[i];
            maps[i] = maps[--nmaps];
        }
    }
    pthread_mutex_unlock(&maps_lock);
    if (last) {
        /* The importer's work on it may still run, and the driver does not
         * wait: the context it was opened in finishes first. */
        CUcontext back;
        bool pushed = shim_drv.cuCtxPushCurrent_v2(m.ctx) == CUDA_SUCCESS;
        shim_drv.cuCtxSynchronize();
        if (pushed)
            shim_drv.cuCtxPopCurrent_v2(&back);
        shim_vmm_unimport(m.base, m.span, m.lens, m.n);
        free(m.lens);
    }
    *err = 0;
    return found;
}
