/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vmm_park.c - see vmm_park.h.
 *
 * A parked range keeps its entries: each piece's first granule its length,
 * and h a mark that is not 0 (the released handle of an own range; the
 * address of the piece it mapped, for a stitched range: stitched ranges
 * map pieces of own ranges, found again by that address once those are
 * backed). Everything runs under v->lock, so that no trim or stitch sees a
 * range half parked; own pieces are released and made on several threads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "cudagate.h"
#include "log.h"
#include "vmm_internal.h"
#include "vmm_park.h"

size_t shim_vmm_spans(shim_vmm *v, pool_span *out, size_t max)
{
    size_t n = 0;
    uintptr_t end = 0; /* of the last span */
    pthread_mutex_lock(&v->lock);
    for (size_t k = 0; k < v->n; k++) {
        const vmm_range *r = &v->r[k];
        size_t ng = r->size / v->gran;
        for (size_t i = 0; !r->borrowed && i < ng; i++) {
            if (!r->g[i].h || !r->g[i].len)
                continue;
            pool_span s = {r->base + i * v->gran, r->g[i].len * v->gran};
            if (n && end == s.addr) { /* the same segment, next piece */
                if (n <= max)
                    out[n - 1].size += s.size;
            } else if (n++ < max) {
                out[n - 1] = s;
            }
            end = s.addr + s.size;
            i += r->g[i].len - 1;
        }
    }
    pthread_mutex_unlock(&v->lock);
    return n;
}

bool shim_vmm_parked(shim_vmm *v)
{
    bool any = false;
    pthread_mutex_lock(&v->lock);
    for (size_t k = 0; k < v->n && !any; k++)
        any = v->r[k].parked;
    pthread_mutex_unlock(&v->lock);
    return any;
}

/* A handle of an own piece and the piece's address. */
typedef struct hloc {
    CUmemGenericAllocationHandle h;
    uintptr_t addr;
} hloc;

static int by_handle(const void *a, const void *b)
{
    CUmemGenericAllocationHandle x = ((const hloc *)a)->h, y = ((const hloc *)b)->h;
    return x < y ? -1 : x > y;
}

/* Every own piece's handle and address, sorted by handle, into *out (*n
 * of them; NULL and 0 when there are none). -ENOMEM. Needs v->lock. */
static int handles_sorted(const shim_vmm *v, hloc **out, size_t *n)
{
    size_t cap = 0;
    for (size_t k = 0; k < v->n; k++)
        cap += v->r[k].borrowed || v->r[k].parked ? 0 : v->r[k].size / v->gran;
    *n = 0;
    *out = cap ? malloc(cap * sizeof(**out)) : NULL;
    if (cap && !*out)
        return -ENOMEM;
    for (size_t k = 0; k < v->n; k++) {
        const vmm_range *r = &v->r[k];
        for (size_t i = 0; !r->borrowed && !r->parked && i < r->size / v->gran; i++)
            if (r->g[i].h && r->g[i].len)
                (*out)[(*n)++] = (hloc){r->g[i].h, r->base + i * v->gran};
    }
    qsort(*out, *n, sizeof(**out), by_handle);
    return 0;
}

/* Unmaps a stitched range's pieces, each marked with its part's address
 * (0 and forgotten if its handle is no own piece's). */
static void park_borrowed(shim_vmm *v, vmm_range *r, const hloc *hl, size_t n)
{
    for (size_t i = 0; i < r->size / v->gran; i++) {
        gran *g = &r->g[i];
        if (!g->h || !g->len)
            continue;
        hloc key = {g->h, 0};
        const hloc *src = n ? bsearch(&key, hl, n, sizeof(*hl), by_handle) : NULL;
        CUresult e = drv.cuMemUnmap(r->base + i * v->gran, g->len * v->gran);
        if (e != CUDA_SUCCESS)
            shim_log(SHIM_LOG_WARN, "device %d: unmapping a stitched piece at %#lx "
                     "failed: %s", v->dev, (unsigned long)(r->base + i * v->gran),
                     vmm_errstr(e));
        size_t len = g->len;
        if (src) {
            g->h = (CUmemGenericAllocationHandle)src->addr;
        } else {
            for (size_t j = 0; j < len; j++)
                r->g[i + j] = (gran){0, 0};
            r->mapped -= len;
        }
        i += len - 1;
    }
    r->parked = true;
}

/* ---- own pieces, on several threads ------------------------------------------
 * What the driver takes for a 2 MiB piece on an H200, one thread
 * (test/gpu/vmm_cost.py): cuMemCreate 17 us, cuMemMap 4 us, cuMemSetAccess
 * 41 us (0.4 us a piece when one call grants a run of them), cuMemUnmap
 * 27 us (as much when one call unmaps a run), cuMemRelease 17 us. So the
 * unmaps run beside the copies out, and the makes beside the copies in. */

/* Out, up to 8 threads unmap. Back, the helper alone makes and maps: beside
 * the copy threads, one thread brought 101 GiB back in 2.65 to 3.11 s in 4
 * of 5 resumes (the fifth 3.81 s), 8 threads in 3.41 to 3.85 s, one H200,
 * two calls of
 * `CUPOOL_LIB=... CYCLES=3 SKIP_DRIVER=1 SIZES=100 scripts/gpu-pause-move`.
 * A run of mapped pieces is granted its access every GRANT_BATCH pieces
 * (64 MiB: the copies start early, yet one call grants many pieces). */
enum { PIECE_THREADS = 8, GRANT_BATCH = 32 };

/* An own piece: its address and bytes, its handle (the one to release, or
 * the one made), and how its step went. */
typedef struct opiece {
    uintptr_t addr;
    size_t len;
    CUmemGenericAllocationHandle h;
    CUresult e;
    size_t range; /* its range's index */
    bool done;    /* out: unmapped */
} opiece;

typedef struct ojob {
    opiece *p;
    size_t n;
    shim_vmm_watch *w; /* tells how far the pieces' bytes are copied */
    atomic_size_t next;
} ojob;

/* Out: waits until w says p's bytes are copied; false if the copies
 * failed (looked at first: a piece is unmapped only to be kept). */
static bool copied(shim_vmm_watch *w, const opiece *p)
{
    while (w && !atomic_load(&w->failed)) {
        if (atomic_load(&w->ready) >= p->addr + p->len)
            return true;
        nanosleep(&(struct timespec){0, 20000L}, NULL);
    }
    return !w;
}

static void *own_worker(void *arg)
{
    ojob *j = arg;
    shim_cudagate_exempt(true); /* the gate is closed to the program's calls */
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
        opiece *p = &j->p[i];
        p->e = copied(j->w, p) ? drv.cuMemUnmap(p->addr, p->len) : CUDA_ERROR_NOT_READY;
        p->done = p->e == CUDA_SUCCESS;
    }
    return NULL;
}

/* Unmaps every piece of p, each once w says its bytes are copied, on up
 * to PIECE_THREADS threads. */
static void own_unmap(opiece *p, size_t n, shim_vmm_watch *w)
{
    ojob j = {.p = p, .n = n, .w = w};
    atomic_init(&j.next, 0);
    pthread_t t[PIECE_THREADS];
    int started = 0;
    while (started < PIECE_THREADS - 1 && (size_t)started * 64 < n &&
           pthread_create(&t[started], NULL, own_worker, &j) == 0)
        started++;
    own_worker(&j); /* this thread too (exempt already: the mover's) */
    for (int i = 0; i < started; i++)
        pthread_join(t[i], NULL);
}

/* Grants pieces [*granted, front) of p their access, a run of adjacent
 * pieces of a range in one call (one call a piece made 101 GiB of 2 MiB
 * pieces take 1.5 s longer on an H200), and tells w how far they are
 * ready. The first failure. */
static CUresult grant_runs(const opiece *p, size_t *granted, size_t front, uint64_t access,
                           shim_vmm_watch *w)
{
    while (*granted < front) {
        const opiece *a = &p[*granted], *b = a;
        while (b + 1 < p + front && b[1].range == a->range && b[1].addr == b->addr + b->len)
            b++;
        CUresult e = vmm_set_access(a->addr, b->addr + b->len - a->addr, access);
        if (e != CUDA_SUCCESS)
            return e;
        *granted = (size_t)(b - p) + 1;
        if (w)
            atomic_store(&w->ready, b->addr + b->len);
    }
    return CUDA_SUCCESS;
}

/* Creates and maps every piece of p (each one's failure in its e), on the
 * helper alone; the run of mapped pieces from the first is granted access
 * every GRANT_BATCH pieces and at the last, w told as they are ready. The
 * failure to grant, if any (what it failed for stays mapped). */
static CUresult own_make(shim_vmm *v, opiece *p, size_t n, uint64_t access,
                         shim_vmm_watch *w)
{
    size_t front = 0, granted = 0; /* pieces [0, front) mapped, [0, granted) granted */
    CUresult e = CUDA_SUCCESS;
    for (size_t i = 0; i < n; i++) {
        opiece *q = &p[i];
        q->h = 0;
        if ((q->e = vmm_create(v, q->len, &q->h)) == CUDA_SUCCESS &&
            (q->e = drv.cuMemMap(q->addr, q->len, 0, q->h, 0)) != CUDA_SUCCESS) {
            drv.cuMemRelease(q->h);
            q->h = 0;
        }
        front += front == i && q->e == CUDA_SUCCESS;
        if (e == CUDA_SUCCESS && front > granted &&
            (front - granted >= GRANT_BATCH || front == n))
            e = grant_runs(p, &granted, front, access, w);
    }
    return e;
}

/* The pieces of v's own ranges parked (or not), in address order, into
 * *l (its n; NULL when none). -ENOMEM. Needs v->lock. */
static int own_list(const shim_vmm *v, bool parked, opiece **l, size_t *n)
{
    size_t cap = 0;
    *n = 0;
    for (size_t k = 0; k < v->n; k++)
        cap += !v->r[k].borrowed && v->r[k].parked == parked ? v->r[k].size / v->gran : 0;
    *l = cap ? malloc(cap * sizeof(**l)) : NULL;
    if (cap && !*l)
        return -ENOMEM;
    for (size_t k = 0; k < v->n; k++) {
        const vmm_range *r = &v->r[k];
        for (size_t i = 0; !r->borrowed && r->parked == parked && i < r->size / v->gran; i++)
            if (r->g[i].h && r->g[i].len) {
                (*l)[(*n)++] = (opiece){r->base + i * v->gran, r->g[i].len * v->gran,
                                        r->g[i].h, CUDA_SUCCESS, k, false};
                i += r->g[i].len - 1;
            }
    }
    return 0;
}

/* The copies out failed: maps the own pieces unmapped again (their
 * memory was never released), with their access (v's device alone where
 * its peers cannot be granted). Whether all of it is back. Needs v->lock. */
static bool remap(shim_vmm *v, const opiece *l, size_t n)
{
    CUresult e = CUDA_SUCCESS, m;
    for (size_t i = 0; i < n; i++)
        if (l[i].done && (m = drv.cuMemMap(l[i].addr, l[i].len, 0, l[i].h, 0)) != CUDA_SUCCESS)
            e = e == CUDA_SUCCESS ? m : e;
    for (size_t k = 0; k < v->n; k++) {
        if (v->r[k].borrowed || v->r[k].parked)
            continue;
        if (vmm_grant_range(v, &v->r[k], v->granted | vmm_access_due(v)) != CUDA_SUCCESS &&
            (m = vmm_grant_range(v, &v->r[k], 1ull << v->dev)) != CUDA_SUCCESS)
            e = e == CUDA_SUCCESS ? m : e;
    }
    if (e != CUDA_SUCCESS)
        shim_log(SHIM_LOG_ERROR, "device %d: mapping its segments again after the pause's "
                 "copies failed did not work: %s; what was not mapped again faults",
                 v->dev, vmm_errstr(e));
    return e == CUDA_SUCCESS;
}

/* Unmaps every own piece not parked as w says its bytes are copied; once
 * w says all are, unmaps the stitched ranges (hl: the own pieces' handles,
 * by handle) and releases the own pieces, their ranges marked parked,
 * *bytes what was released. Where w fails, maps the pieces unmapped again:
 * -EIO, or -EFAULT if some could not be. Needs v->lock. */
static int park_own(shim_vmm *v, shim_vmm_watch *w, const hloc *hl, size_t nh,
                    uint64_t *bytes)
{
    opiece *l;
    size_t n;
    if (w && atomic_load(&w->failed)) /* an earlier device's park saw it: touch nothing */
        return -EIO;
    if (own_list(v, false, &l, &n))
        return -ENOMEM;
    own_unmap(l, n, w);
    while (w && atomic_load(&w->ready) != UINTPTR_MAX && !atomic_load(&w->failed))
        nanosleep(&(struct timespec){0, 20000L}, NULL);
    if (w && atomic_load(&w->failed)) {
        int err = remap(v, l, n) ? -EIO : -EFAULT;
        free(l);
        return err;
    }
    for (size_t k = 0; k < v->n; k++) /* they map own pieces: before those go */
        if (v->r[k].borrowed && !v->r[k].parked)
            park_borrowed(v, &v->r[k], hl, nh);
    for (size_t i = 0; i < n; i++) {
        if (l[i].e == CUDA_SUCCESS)
            l[i].e = drv.cuMemRelease(l[i].h);
        if (l[i].e == CUDA_SUCCESS)
            *bytes += l[i].len;
        else
            shim_log(SHIM_LOG_WARN, "device %d: giving back %zu bytes at %#lx for the "
                     "pause failed: %s", v->dev, l[i].len, (unsigned long)l[i].addr,
                     vmm_errstr(l[i].e));
    }
    for (size_t k = 0; k < v->n; k++)
        v->r[k].parked |= !v->r[k].borrowed;
    free(l);
    return 0;
}

int shim_vmm_park(shim_vmm *v, uint64_t *bytes, shim_vmm_watch *w)
{
    hloc *hl;
    size_t n;
    *bytes = 0;
    pthread_mutex_lock(&v->lock);
    int err = handles_sorted(v, &hl, &n);
    if (!err)
        err = park_own(v, w, hl, n, bytes);
    pthread_mutex_unlock(&v->lock);
    free(hl);
    return err;
}

/* ---- back ---------------------------------------------------------------- */

/* Calls fn(v, r, i, arg) for each piece (granule i) of every parked range
 * of the kind asked (stitched or own), in address order, until one fails;
 * then calls undo, if any, for each piece done before it. */
typedef CUresult (*piece_fn)(shim_vmm *v, vmm_range *r, size_t i, void *arg);

static CUresult each_piece(shim_vmm *v, bool borrowed, piece_fn fn, piece_fn undo, void *arg)
{
    CUresult e = CUDA_SUCCESS;
    size_t done = 0;
    for (size_t k = 0; e == CUDA_SUCCESS && k < v->n; k++) {
        vmm_range *r = &v->r[k];
        for (size_t i = 0; r->parked && r->borrowed == borrowed && i < r->size / v->gran; i++) {
            if (!r->g[i].h || !r->g[i].len)
                continue;
            if ((e = fn(v, r, i, arg)) != CUDA_SUCCESS)
                break;
            done++;
            i += r->g[i].len - 1;
        }
    }
    if (e == CUDA_SUCCESS || !undo)
        return e;
    for (size_t k = 0; done && k < v->n; k++) {
        vmm_range *r = &v->r[k];
        for (size_t i = 0; done && r->parked && r->borrowed == borrowed &&
                           i < r->size / v->gran; i++) {
            if (!r->g[i].h || !r->g[i].len)
                continue;
            undo(v, r, i, arg);
            done--;
            i += r->g[i].len - 1;
        }
    }
    return e;
}

/* The new handles of own pieces, in the order each_piece visits them. */
typedef struct backing {
    CUmemGenericAllocationHandle *h;
    size_t n;
} backing;

/* The unpark failed: w (if any) learns it, and nothing copies into v's
 * memory once this returns. */
static void watch_fail(shim_vmm_watch *w)
{
    if (w && !atomic_exchange(&w->failed, true) && w->drain)
        w->drain(w->arg);
}

/* Creates and maps every parked own piece with the access
 * v's mappings grant, their handles into b in address order, w told as
 * they are ready; on a failure, releases what was made and returns the
 * first failure. */
static CUresult own_back_all(shim_vmm *v, backing *b, shim_vmm_watch *w)
{
    opiece *l;
    size_t n;
    if (own_list(v, true, &l, &n))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult e = own_make(v, l, n, v->granted | vmm_access_due(v), w);
    for (size_t i = 0; i < n && e == CUDA_SUCCESS; i++)
        e = l[i].e;
    if (e != CUDA_SUCCESS)
        watch_fail(w);
    for (size_t i = 0; i < n; i++) {
        if (e != CUDA_SUCCESS && l[i].h) { /* nothing used it yet */
            drv.cuMemUnmap(l[i].addr, l[i].len);
            drv.cuMemRelease(l[i].h);
        }
        b->h[i] = l[i].h;
    }
    b->n = e == CUDA_SUCCESS ? n : 0;
    free(l);
    return e;
}

static CUresult own_undo(shim_vmm *v, vmm_range *r, size_t i, void *arg)
{
    backing *b = arg;
    drv.cuMemUnmap(r->base + i * v->gran, r->g[i].len * v->gran);
    drv.cuMemRelease(b->h[--b->n]);
    return CUDA_SUCCESS;
}

/* Commits the new handles to the entries (own_back's order). */
static CUresult own_commit(shim_vmm *v, vmm_range *r, size_t i, void *arg)
{
    backing *b = arg;
    for (size_t j = 0; j < r->g[i].len; j++)
        r->g[i + j].h = b->h[b->n];
    b->n++;
    (void)v;
    return CUDA_SUCCESS;
}

/* The handle of the own piece a stitched piece maps (its mark: the
 * address), own ranges backed and committed already; 0 if none. */
static CUmemGenericAllocationHandle source_of(const shim_vmm *v, const gran *g)
{
    uintptr_t a = (uintptr_t)g->h;
    long k = vmm_find(v, a);
    const vmm_range *s = k < 0 ? NULL : &v->r[k];
    return s && !s->borrowed ? s->g[(a - s->base) / v->gran].h : 0;
}

static CUresult stitched_back(shim_vmm *v, vmm_range *r, size_t i, void *arg)
{
    (void)arg;
    CUmemGenericAllocationHandle h = source_of(v, &r->g[i]);
    return h ? drv.cuMemMap(r->base + i * v->gran, r->g[i].len * v->gran, 0, h, 0)
             : CUDA_ERROR_INVALID_VALUE;
}

static CUresult stitched_undo(shim_vmm *v, vmm_range *r, size_t i, void *arg)
{
    (void)arg;
    return drv.cuMemUnmap(r->base + i * v->gran, r->g[i].len * v->gran);
}

static CUresult stitched_commit(shim_vmm *v, vmm_range *r, size_t i, void *arg)
{
    (void)arg;
    CUmemGenericAllocationHandle h = source_of(v, &r->g[i]);
    for (size_t j = 0; j < r->g[i].len; j++)
        r->g[i + j].h = h;
    return CUDA_SUCCESS;
}

/* Grants the parked stitched ranges the access v's mappings give (own
 * pieces get it as they are made). */
static CUresult stitched_access(shim_vmm *v)
{
    CUresult e = CUDA_SUCCESS;
    uint64_t mask = v->granted | vmm_access_due(v);
    for (size_t k = 0; e == CUDA_SUCCESS && k < v->n; k++)
        if (v->r[k].parked && v->r[k].borrowed)
            e = vmm_grant_range(v, &v->r[k], mask);
    return e;
}

/* Backs the own ranges (committed) and then the stitched ones; on failure
 * everything made is released, the marks left as they were, w told before.
 * Needs v->lock. */
static CUresult unpark_locked(shim_vmm *v, backing *b, shim_vmm_watch *w)
{
    CUresult e = own_back_all(v, b, w);
    if (e != CUDA_SUCCESS)
        return e;
    size_t made = b->n;
    b->n = 0;
    each_piece(v, false, own_commit, NULL, b); /* the marks are now the handles */
    e = each_piece(v, true, stitched_back, stitched_undo, NULL);
    if (e == CUDA_SUCCESS && (e = stitched_access(v)) != CUDA_SUCCESS)
        each_piece(v, true, stitched_undo, NULL, NULL);
    if (e == CUDA_SUCCESS) {
        each_piece(v, true, stitched_commit, NULL, NULL);
        return e;
    }
    b->n = made; /* own pieces parked again: their released handles mark them */
    watch_fail(w);
    each_piece(v, false, own_undo, NULL, b);
    return e;
}

int shim_vmm_unpark(shim_vmm *v, shim_vmm_watch *w)
{
    pthread_mutex_lock(&v->lock);
    size_t cap = 0;
    for (size_t k = 0; k < v->n; k++)
        cap += v->r[k].parked && !v->r[k].borrowed ? v->r[k].size / v->gran : 0;
    backing b = {cap ? calloc(cap, sizeof(*b.h)) : NULL, 0};
    CUresult e = cap && !b.h ? CUDA_ERROR_OUT_OF_MEMORY : unpark_locked(v, &b, w);
    for (size_t k = 0; e == CUDA_SUCCESS && k < v->n; k++)
        v->r[k].parked = false;
    if (e == CUDA_SUCCESS && w)
        atomic_store(&w->ready, UINTPTR_MAX);
    else if (e != CUDA_SUCCESS)
        watch_fail(w);
    pthread_mutex_unlock(&v->lock);
    free(b.h);
    if (e != CUDA_SUCCESS && e != CUDA_ERROR_OUT_OF_MEMORY)
        shim_log(SHIM_LOG_ERROR, "device %d: backing its segments again after the pause "
                 "failed: %s", v->dev, vmm_errstr(e));
    return e == CUDA_SUCCESS ? 0 : e == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}
