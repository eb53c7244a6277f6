/* SPDX-License-Identifier: Apache-2.0 */
/*
 * comm.c - see comm.h.
 *
 * The NCCL calls that queue work are interposed: each notes the memory it
 * names in the calling thread's window (a group's calls add up until its
 * end, where NCCL queues them), then calls NCCL's own. The CUPTI callback
 * (shim_comm_work) gives the window to the streams that get work while the
 * thread is inside. The NCCL calls that create, grow or tear down a
 * communicator are interposed to count who is inside them: memory
 * allocated or freed meanwhile may be NCCL's own, which its kernels use
 * without naming. Those that make or end one tell job.h too (cupool job).
 *
 * The streams the device tracks are known here too (shim_comm_track), each
 * with its marks. Nothing leaves a fence unless CUPTI watches
 * (CUPOOL_CUPTI, cupti.h): without it, the wrappers only count who is
 * inside NCCL and call it, and every stream is in every fence.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cupti_driver_cbid.h>

#include "addrmap.h"
#include "callkind.h"
#include "comm.h"
#include "config.h"
#include "driver.h"
#include "symbols.h"
#include "grow.h"
#include "job.h"
#include "log.h"
#include "process.h"

#define EXPORT __attribute__((visibility("default")))

enum {
    COMM_STREAMS_MAX = 32, /* comm streams holding buffers; more are marked */
    COMM_RANGES_MAX = 64,  /* buffers a stream holds before it is marked */
    WINDOW_MAX = 64,       /* buffers a call or group names, else "all" */
};

typedef struct comm_range {
    uintptr_t lo, hi;      /* [lo, hi) */
    uint64_t seq;          /* when last named */
} comm_range;

/* A non-blocking stream the device tracks, or one NCCL queued work on. */
typedef struct comm_stream {
    void *stream;
    size_t pos;               /* its index in streams[] */
    _Atomic uint64_t marks;   /* bumped when a fence must include it */
    _Atomic uint64_t covered; /* the marks a fence has covered */
    comm_range *ranges;       /* COMM_RANGES_MAX, once it is a comm stream */
    size_t nranges;
    bool told_foreign;        /* CUPOOL_LOG=debug said so once */
    int dev;                  /* the device that tracks it, or -1 */
    uint64_t paid;            /* the device's order it has waited for
                                 (owing while owed[dev] is past it) */
    bool dirty;               /* in dirty[], at dirty_pos */
    size_t dirty_pos;
} comm_stream;

/* Guards the streams and their buffers; the counters are atomic so that a
 * fence may read them while the CUPTI callback marks. Taken under a pool's
 * lock (a free), under a device's (a fence) and in CUPTI's callback on any
 * thread; takes nothing of cupool's but the log's flag. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static comm_stream **streams;  /* every stream known */
static size_t nknown, known_cap;
static pool_addrmap index_;    /* stream -> its comm_stream */
static comm_stream *comms[COMM_STREAMS_MAX]; /* those holding buffers */
static int ncomms;
static atomic_int nstreams;    /* nknown, read without the lock */
static atomic_int ncomm;       /* ncomms, read without the lock */
static uint64_t seq;           /* buffers named so far */
static atomic_int inside;      /* threads inside an NCCL call now */
static atomic_bool watching;   /* CUPTI reports work (shim_comm_watching) */
static pool_addrmap own;       /* blocks allocated while one was: NCCL's */
/* The streams marked since a fence covered them (a fence looks at these
 * only). Its room grows with streams[] (add_locked): a mark never needs
 * memory, so none is ever lost to the host running out. */
static comm_stream **dirty;
static size_t ndirty, dirty_cap;
/* Lazy order: each device's orders owed (bumped by shim_comm_owe; a
 * stream owes while it has paid less), whether any was ever owed. */
static _Atomic uint64_t owed[SHIM_MAX_DEVICES];
static atomic_bool owed_any;
static bool (*pay_fn)(int dev, void *s); /* set at start-up */

/* The calling thread: how deep inside NCCL calls, how deep in a group,
 * and the memory named since its outermost call or group began. */
static _Thread_local int depth, group;
static _Thread_local comm_range window[WINDOW_MAX];
static _Thread_local size_t nwindow;
static _Thread_local bool window_all;

/* s's entry, or NULL. Needs lock. */
static comm_stream *find_locked(void *s)
{
    return pool_addrmap_get(&index_, (uintptr_t)s);
}

/* Puts c in the dirty list (a stream no device tracks stays out: no fence
 * looks at it). The list has room for every known stream. Needs lock. */
static void dirty_add(comm_stream *c)
{
    if (c->dirty || c->dev < 0)
        return;
    c->dirty = true;
    c->dirty_pos = ndirty;
    dirty[ndirty++] = c;
}

/* Needs lock (as every mark does). */
static void mark(comm_stream *c)
{
    atomic_fetch_add_explicit(&c->marks, 1, memory_order_release);
    dirty_add(c);
}

static void undirty(comm_stream *c)
{
    if (!c->dirty)
        return;
    c->dirty = false;
    dirty[c->dirty_pos] = dirty[--ndirty];
    dirty[c->dirty_pos]->dirty_pos = c->dirty_pos;
}

static void mark_all_locked(void)
{
    for (size_t i = 0; i < nknown; i++)
        mark(streams[i]);
}

/* A new entry for s, marked (its past unknown) unless it is new to CUDA
 * as well (one made before CUPTI watched is marked when it starts); NULL
 * if the host is out of memory (s then stays in every fence). Needs lock. */
static comm_stream *add_locked(void *s, bool fresh)
{
    comm_stream *c = calloc(1, sizeof(*c));
    if (!c || pool_addrmap_reserve(&index_) ||
        !pool_grow((void **)&streams, &known_cap, nknown, sizeof(*streams)) ||
        !pool_grow((void **)&dirty, &dirty_cap, nknown, sizeof(*dirty))) {
        free(c);
        shim_log(SHIM_LOG_WARN, "out of host memory tracking a stream's work; "
                 "every fence includes it");
        return NULL;
    }
    c->stream = s;
    c->pos = nknown;
    c->dev = -1;
    if (!fresh)
        mark(c);
    streams[nknown++] = c;
    pool_addrmap_put(&index_, (uintptr_t)s, c);
    atomic_store(&nstreams, (int)nknown);
    return c;
}

/* Says once per call which calls mark every stream (CUPOOL_LOG=debug): a
 * frequent one costs the streams their leave. */
static void tell_unknown(unsigned cbid)
{
    static _Atomic uint64_t told[(CUPTI_DRIVER_TRACE_CBID_SIZE + 63) / 64];
    if (cbid >= CUPTI_DRIVER_TRACE_CBID_SIZE)
        return;
    uint64_t bit = 1ull << (cbid % 64);
    if (!(atomic_fetch_or(&told[cbid / 64], bit) & bit))
        shim_log(SHIM_LOG_DEBUG, "driver call %u (CUPTI's id) queues work cupool "
                 "cannot place: every stream is fenced after it", cbid);
}

/* The default streams (NULL, legacy, per-thread) are ordered by every
 * fence's legacy event: never left out, never known here. */
static bool is_default(void *s)
{
    return (uintptr_t)s <= (uintptr_t)CU_STREAM_PER_THREAD;
}

/* Makes c a comm stream: room for buffers, in comms[]. False if there is
 * no room (c is then marked at each collective instead). Needs lock. */
static bool comm_locked(comm_stream *c)
{
    if (c->ranges)
        return true;
    if (ncomms == COMM_STREAMS_MAX ||
        !(c->ranges = calloc(COMM_RANGES_MAX, sizeof(*c->ranges))))
        return false;
    comms[ncomms++] = c;
    atomic_store(&ncomm, ncomms);
    shim_log(SHIM_LOG_DEBUG, "stream %p is a comm stream (NCCL's work on it)", c->stream);
    return true;
}

/* Adds the window's buffers to s's, making s a comm stream if it was not
 * (an entry first if it had none: marked, its past unknown). Needs lock. */
static void take_window_locked(void *s)
{
    comm_stream *c = find_locked(s);
    if (!c && !(c = add_locked(s, false)))
        return;
    if (window_all || !comm_locked(c)) {
        mark(c);
        return;
    }
    for (size_t w = 0; w < nwindow; w++) {
        size_t i = 0;
        while (i < c->nranges && (c->ranges[i].lo != window[w].lo || c->ranges[i].hi != window[w].hi))
            i++;
        if (i == c->nranges) {
            if (c->nranges == COMM_RANGES_MAX) {
                mark(c); /* a fence will cover them all, and drop them */
                return;
            }
            c->ranges[c->nranges++] = window[w];
        }
        c->ranges[i].seq = ++seq;
    }
}


/* A driver call's return: its work is queued (marks). Needs lock. */
static void work_locked(unsigned cbid, enum call_kind k, void *s)
{
    if (k == CALL_UNKNOWN) {
        tell_unknown(cbid);
        mark_all_locked();
    } else if (depth) {
        take_window_locked(s);
    } else {
        comm_stream *c = find_locked(s);
        if (c) {
            mark(c);
            if (c->ranges && !c->told_foreign) {
                c->told_foreign = true;
                shim_log(SHIM_LOG_DEBUG, "comm stream %p got other work (driver call %u, "
                         "CUPTI's id): fenced after it", s, cbid);
            }
        }
    }
}

static void due_locked(enum call_kind k, void *s);

/* The calling thread is paying (its wait is a driver call too, whose
 * callback must not take the lock again should CUPTI report it). */
static _Thread_local bool paying;

void shim_comm_call(unsigned cbid, const void *params, bool entry)
{
    if (paying)
        return;
    if (entry ? !atomic_load_explicit(&owed_any, memory_order_acquire)
              : !depth && !atomic_load_explicit(&nstreams, memory_order_acquire))
        return;
    void *s = NULL;
    enum call_kind k = shim_call_kind(cbid, params, &s);
    if (k == CALL_NO_WORK || (k == CALL_STREAM && is_default(s)))
        return;
    pthread_mutex_lock(&lock);
    if (entry)
        due_locked(k, s);
    else
        work_locked(cbid, k, s);
    pthread_mutex_unlock(&lock);
}

bool shim_comm_track(void *s, int dev)
{
    pthread_mutex_lock(&lock);
    comm_stream *c = find_locked(s);
    if (!c)
        c = add_locked(s, true);
    if (c && dev >= 0 && dev < SHIM_MAX_DEVICES) {
        c->dev = dev;
        c->paid = atomic_load(&owed[dev]); /* it waits at once (fence.c) */
        if (atomic_load(&c->marks) != atomic_load(&c->covered))
            dirty_add(c); /* marked while no device tracked it */
    }
    pthread_mutex_unlock(&lock);
    return c != NULL && c->dev == dev;
}

/* ---- ordering streams lazily ------------------------------------------ */

void shim_comm_on_pay(bool (*pay)(int dev, void *s)) { pay_fn = pay; }

bool shim_comm_owe(int dev)
{
    if (!pay_fn || dev < 0 || dev >= SHIM_MAX_DEVICES)
        return false;
    pthread_mutex_lock(&lock);
    bool lazy = atomic_load(&watching);
    if (lazy) {
        atomic_fetch_add_explicit(&owed[dev], 1, memory_order_relaxed);
        atomic_store_explicit(&owed_any, true, memory_order_release);
    }
    pthread_mutex_unlock(&lock);
    return lazy;
}

static bool owes(const comm_stream *c)
{
    return c->dev >= 0 && c->paid != atomic_load_explicit(&owed[c->dev], memory_order_relaxed);
}

/* c pays what it owes, if it owes and can wait now: on the device's
 * latest order, which covers every one owed before. Needs lock (so no
 * order is owed meanwhile). Returns whether it still owes. */
static bool pay_locked(comm_stream *c)
{
    if (!owes(c))
        return false;
    paying = true;
    bool paid = pay_fn(c->dev, c->stream);
    paying = false;
    if (!paid)
        return true;
    c->paid = atomic_load_explicit(&owed[c->dev], memory_order_relaxed);
    return false;
}

/* Every stream pays; returns how many still owe (capturing). */
static size_t pay_all_locked(void)
{
    size_t left = 0;
    for (size_t i = 0; i < nknown; i++)
        left += pay_locked(streams[i]);
    return left;
}

/* A driver call's entry: a stream owing pays before its work is queued.
 * Needs lock. */
static void due_locked(enum call_kind k, void *s)
{
    if (k == CALL_UNKNOWN) {
        pay_all_locked();
    } else {
        comm_stream *c = find_locked(s);
        if (c)
            pay_locked(c);
    }
}

bool shim_comm_begin(void)
{
    if (!atomic_load_explicit(&watching, memory_order_acquire))
        return false;
    pthread_mutex_lock(&lock);
    return true;
}

void shim_comm_end(void)
{
    pthread_mutex_unlock(&lock);
}

size_t shim_comm_due(int dev, shim_comm_due_stream **out, size_t *cap)
{
    size_t n = 0;
    for (size_t i = 0; i < ndirty; i++) {
        comm_stream *c = dirty[i];
        uint64_t marks = atomic_load_explicit(&c->marks, memory_order_acquire);
        if (c->dev != dev || marks == atomic_load_explicit(&c->covered, memory_order_relaxed))
            continue;
        if (!pool_grow((void **)out, cap, n, sizeof(**out)))
            return SIZE_MAX;
        (*out)[n++] = (shim_comm_due_stream){c->stream, c, {marks, seq}};
    }
    return n;
}

void shim_comm_covered(const shim_comm_due_stream *due)
{
    comm_stream *c = due->entry;
    const shim_comm_mark *m = &due->mark;
    if (m->marks - atomic_load(&c->covered) < UINT64_MAX / 2)
        atomic_store(&c->covered, m->marks);
    if (atomic_load(&c->covered) == atomic_load(&c->marks))
        undirty(c);
    /* The buffers named before that event: a block freed from now on is
     * fenced after it (fences retire in order). */
    size_t k = 0;
    for (size_t i = 0; i < c->nranges; i++)
        if (c->ranges[i].seq > m->seq)
            c->ranges[k++] = c->ranges[i];
    c->nranges = k;
}

void shim_comm_allocated(uintptr_t addr)
{
    if (!atomic_load_explicit(&inside, memory_order_acquire))
        return;
    pthread_mutex_lock(&lock);
    if (!pool_addrmap_get(&own, addr)) {
        if (pool_addrmap_reserve(&own) == 0)
            pool_addrmap_put(&own, addr, (void *)1);
        else
            shim_log(SHIM_LOG_WARN, "out of host memory noting NCCL's own "
                     "memory; its free will fence every stream");
    }
    pthread_mutex_unlock(&lock);
}

void shim_comm_freed(uintptr_t addr, size_t size)
{
    if (!atomic_load_explicit(&ncomm, memory_order_acquire) &&
        !atomic_load_explicit(&inside, memory_order_acquire))
        return;
    pthread_mutex_lock(&lock);
    if (atomic_load(&inside) || pool_addrmap_take(&own, addr)) {
        mark_all_locked();
    } else {
        uintptr_t hi = addr + (size ? size : 1);
        for (int i = 0; i < ncomms; i++) {
            comm_stream *c = comms[i];
            for (size_t r = 0; r < c->nranges; r++)
                if (c->ranges[r].lo < hi && addr < c->ranges[r].hi) {
                    mark(c);
                    break;
                }
        }
    }
    pthread_mutex_unlock(&lock);
}

void shim_comm_watching(void)
{
    /* Work queued before went unseen: every stream known is marked. */
    pthread_mutex_lock(&lock);
    atomic_store(&watching, true);
    mark_all_locked();
    pthread_mutex_unlock(&lock);
}

void shim_comm_unwatching(void)
{
    /* No stream owes from now on; those that do pay while CUPTI still
     * reports their work (a call entering meanwhile pays too). */
    pthread_mutex_lock(&lock);
    atomic_store(&watching, false);
    size_t left = pay_all_locked();
    if (left)
        shim_log(SHIM_LOG_ERROR, "%zu streams could not be ordered as CUPTI was let go "
                 "(capturing a graph): a block reused on one may still be in use", left);
    pthread_mutex_unlock(&lock);
}

bool shim_comm_active(void)
{
    return atomic_load_explicit(&ncomm, memory_order_acquire) != 0;
}

void shim_comm_forget(void *s)
{
    if (!atomic_load_explicit(&nstreams, memory_order_acquire))
        return;
    pthread_mutex_lock(&lock);
    comm_stream *c = pool_addrmap_take(&index_, (uintptr_t)s);
    if (c) {
        undirty(c);
        streams[c->pos] = streams[--nknown];
        streams[c->pos]->pos = c->pos;
        atomic_store(&nstreams, (int)nknown);
        for (int i = 0; i < ncomms; i++)
            if (comms[i] == c) {
                comms[i] = comms[--ncomms];
                atomic_store(&ncomm, ncomms);
                break;
            }
        free(c->ranges);
        free(c);
    }
    pthread_mutex_unlock(&lock);
}

/* ---- NCCL's calls ----------------------------------------------------- */

typedef int nccl_result; /* ncclResult_t */
enum { NCCL_SYSTEM_ERROR = 2 };

/* NCCL's function name, found once (NULL: not loaded). */
static void *nccl_fn(_Atomic(void *) *slot, const char *name)
{
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (f)
        return f;
    static const char *const nccl[] = {"libnccl.so.2", NULL};
    if (!(f = shim_dlsym_loaded(name, nccl)))
        shim_log(SHIM_LOG_ERROR, "%s called, but NCCL's own was not found", name);
    atomic_store_explicit(slot, f, memory_order_release);
    return f;
}

/* Bytes in one element of an ncclDataType_t; 0 if unknown. */
static size_t elem_size(int type)
{
    static const unsigned char sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return type >= 0 && type < (int)sizeof(sizes) ? sizes[type] : 0;
}

/* The ranks of comm (ncclCommCount), or 0 if it cannot tell. */
static size_t comm_ranks(void *comm)
{
    static _Atomic(void *) count_fn;
    nccl_result (*count)(void *, int *) =
        (nccl_result (*)(void *, int *))nccl_fn(&count_fn, "ncclCommCount");
    int n = 0;
    return count && count(comm, &n) == 0 && n > 0 ? (size_t)n : 0;
}

/* Adds [p, p + count * ranks elements of type) to the window. */
static void name_buffer(const void *p, size_t count, int type, size_t ranks)
{
    size_t es = elem_size(type), bytes;
    if (!p)
        return;
    if (!es || !ranks || __builtin_mul_overflow(count, es, &bytes) ||
        __builtin_mul_overflow(bytes, ranks, &bytes) || nwindow == WINDOW_MAX) {
        window_all = true;
        return;
    }
    window[nwindow++] = (comm_range){(uintptr_t)p, (uintptr_t)p + (bytes ? bytes : 1), 0};
}

static void window_clear(void)
{
    nwindow = 0;
    window_all = false;
}

/* Each NCCL call is told as it begins (under CUPOOL_CUPTI=auto, CUPTI
 * starts once fences came often after the first: cupti.h). Inside is
 * counted whether or not CUPTI watches: under CUPOOL_CUPTI=1 NCCL may set up before the first pool
 * exists (CUPTI starts with it), and the memory it allocates then is its
 * own all the same. */
static void (*first_call)(void); /* set at start-up */

void shim_comm_on_first_call(void (*start)(void)) { first_call = start; }

static void enter(void)
{
    if (first_call)
        first_call();
    shim_count(SHIM_nccl_calls);
    depth++;
    atomic_fetch_add(&inside, 1);
}

static void leave(void)
{
    atomic_fetch_sub(&inside, 1);
    if (--depth == 0 && !group)
        window_clear();
}

/* Declares f, NCCL's own function name of type params (an ncclResult_t
 * function), or returns ncclSystemError if NCCL has none. */
#define NCCL_REAL(name, params)                                               \
    static _Atomic(void *) real;                                              \
    nccl_result (*f) params = (nccl_result (*) params)nccl_fn(&real, #name);  \
    if (!f)                                                                   \
        return NCCL_SYSTEM_ERROR

/* The NCCL gate (gate.h), passed at a collective outside any group and at
 * a group's outermost start, left at its return and at the group's end;
 * there, past the gate and outside any group, the communicators cupool
 * left suspended are resumed (job.h). Then a collective is counted on its
 * communicator. */
static nccl_result gate_enter(void *comm, bool group_start)
{
    bool outermost = !depth && !group;
    if (!outermost) {
        shim_job_issue(comm);
        return 0;
    }
    shim_gate_enter(comm, shim_job_behind);
    nccl_result r = shim_job_resume_lazy();
    if (r)
        shim_gate_leave();
    else if (!group_start)
        shim_job_issue(comm);
    return r;
}

static void gate_leave(void)
{
    if (!depth && !group)
        shim_gate_leave();
}

/* A collective: the two buffers it names, count elements of type, times
 * the ranks for the calls whose buffers hold one part per rank. */
#define COLLECTIVE(name, params, args, sendbuf, recvbuf, per_rank)            \
    EXPORT nccl_result name params;                                           \
    EXPORT nccl_result name params                                            \
    {                                                                         \
        NCCL_REAL(name, params);                                              \
        nccl_result gated = gate_enter(comm, false);                          \
        if (gated)                                                            \
            return gated;                                                     \
        enter();                                                              \
        if (atomic_load_explicit(&watching, memory_order_relaxed)) {           \
            size_t ranks = per_rank ? comm_ranks(comm) : 1;                   \
            name_buffer(sendbuf, count, type, ranks);                         \
            name_buffer(recvbuf, count, type, ranks);                         \
        } else {                                                              \
            /* Unnamed: if CUPTI starts before its work is queued (a      \
             * group's end), the streams it lands on are marked. */        \
            window_all = true;                                                \
        }                                                                     \
        nccl_result r = f args;                                               \
        leave();                                                              \
        gate_leave();                                                         \
        return r;                                                             \
    }

#define P7(t5) (const void *send, void *recv, size_t count, int type, t5, void *comm, void *stream)
COLLECTIVE(ncclAllReduce, P7(int op), (send, recv, count, type, op, comm, stream), send, recv, 0)
COLLECTIVE(ncclBroadcast, P7(int root), (send, recv, count, type, root, comm, stream), send, recv, 0)
COLLECTIVE(ncclReduceScatter, P7(int op), (send, recv, count, type, op, comm, stream), send, recv, 1)
COLLECTIVE(ncclGather, P7(int root), (send, recv, count, type, root, comm, stream), send, recv, 1)
COLLECTIVE(ncclScatter, P7(int root), (send, recv, count, type, root, comm, stream), send, recv, 1)
#undef P7
#define P6 (const void *send, void *recv, size_t count, int type, void *comm, void *stream)
COLLECTIVE(ncclAllGather, P6, (send, recv, count, type, comm, stream), send, recv, 1)
COLLECTIVE(ncclAlltoAll, P6, (send, recv, count, type, comm, stream), send, recv, 1)
#undef P6
COLLECTIVE(ncclReduce, (const void *send, void *recv, size_t count, int type, int op, int root,
                        void *comm, void *stream),
           (send, recv, count, type, op, root, comm, stream), send, recv, 0)
COLLECTIVE(ncclBcast, (void *buf, size_t count, int type, int root, void *comm, void *stream),
           (buf, count, type, root, comm, stream), buf, NULL, 0)
COLLECTIVE(ncclSend, (const void *send, size_t count, int type, int peer, void *comm, void *stream),
           (send, count, type, peer, comm, stream), send, NULL, 0)
COLLECTIVE(ncclRecv, (void *recv, size_t count, int type, int peer, void *comm, void *stream),
           (recv, count, type, peer, comm, stream), recv, NULL, 0)
#undef COLLECTIVE

/* A group: its calls queue their work at its outermost end. */
EXPORT nccl_result ncclGroupStart(void);
EXPORT nccl_result ncclGroupStart(void)
{
    NCCL_REAL(ncclGroupStart, (void));
    bool outermost = !depth && !group;
    nccl_result r = outermost ? gate_enter(NULL, true) : 0;
    if (r)
        return r;
    r = f();
    group += r == 0;
    if (r && outermost)
        shim_gate_leave();
    return r;
}

EXPORT nccl_result ncclGroupEnd(void);
EXPORT nccl_result ncclGroupEnd(void)
{
    NCCL_REAL(ncclGroupEnd, (void));
    enter();
    nccl_result r = f();
    bool ended = group == 1;
    group -= group > 0;
    leave();
    if (ended && !depth)
        shim_gate_leave();
    return r;
}

/* A call that finalizes a communicator: only counted as being inside NCCL
 * (its own memory comes and goes meanwhile). */
#define INSIDE(name, params, args)                                            \
    EXPORT nccl_result name params;                                           \
    EXPORT nccl_result name params                                            \
    {                                                                         \
        NCCL_REAL(name, params);                                              \
        enter();                                                              \
        window_all = true;                                                    \
        nccl_result r = f args;                                               \
        leave();                                                              \
        return r;                                                             \
    }
typedef struct { char internal[128]; } nccl_unique_id;
INSIDE(ncclCommFinalize, (void *comm), (comm))
#undef INSIDE

/* The calls that make or end a communicator tell job.h as well: an end
 * before NCCL's own call (job.c then asks nothing more of it), a making
 * after, once NCCL gave the communicator (ncclInProgress: a non-blocking
 * one, still setting up, whose handle is good). */
enum { NCCL_IN_PROGRESS = 7 };
#define RECORDED(name, params, args, before, after)                           \
    EXPORT nccl_result name params;                                           \
    EXPORT nccl_result name params                                            \
    {                                                                         \
        NCCL_REAL(name, params);                                              \
        before;                                                               \
        enter();                                                              \
        window_all = true;                                                    \
        nccl_result r = f args;                                               \
        leave();                                                              \
        if (r == 0 || r == NCCL_IN_PROGRESS) {                                \
            after;                                                            \
        }                                                                     \
        return r;                                                             \
    }
#define ID_HASH(id) shim_job_hash(SHIM_JOB_FNV_BASIS, &(id), sizeof(id))
RECORDED(ncclCommInitRank, (void **comm, int n, nccl_unique_id id, int rank),
         (comm, n, id, rank), (void)0, shim_job_made(*comm, ID_HASH(id), rank, n))
RECORDED(ncclCommInitRankConfig, (void **comm, int n, nccl_unique_id id, int rank, void *cfg),
         (comm, n, id, rank, cfg), (void)0, shim_job_made(*comm, ID_HASH(id), rank, n))
RECORDED(ncclCommInitRankScalable, (void **comm, int n, int rank, int nids,
                                    nccl_unique_id *ids, void *cfg),
         (comm, n, rank, nids, ids, cfg), (void)0,
         shim_job_made(*comm, shim_job_hash(SHIM_JOB_FNV_BASIS, ids,
                                            nids > 0 ? (size_t)nids * sizeof(*ids) : 0),
                       rank, n))
RECORDED(ncclCommInitAll, (void **comm, int n, const int *devs), (comm, n, devs), (void)0,
         shim_job_made_all(comm, n))
RECORDED(ncclCommSplit, (void *comm, int color, int key, void **out, void *cfg),
         (comm, color, key, out, cfg), (void)0, shim_job_split(comm, color, *out))
/* A shrunk or grown communicator is counted, not listed (job.h). */
RECORDED(ncclCommShrink, (void *comm, int *excluded, int nexcluded, void **out, void *cfg,
                          int flags), (comm, excluded, nexcluded, out, cfg, flags), (void)0,
         shim_job_unnamed(*out))
RECORDED(ncclCommGrow, (void *comm, int n, const nccl_unique_id *id, int rank, void **out,
                        void *cfg), (comm, n, id, rank, out, cfg), (void)0,
         shim_job_unnamed(*out))
RECORDED(ncclCommDestroy, (void *comm), (comm), shim_job_gone(comm), (void)0)
RECORDED(ncclCommAbort, (void *comm), (comm), shim_job_gone(comm), (void)0)
#undef ID_HASH
#undef RECORDED
#undef NCCL_REAL
