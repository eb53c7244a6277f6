/* SPDX-License-Identifier: Apache-2.0 */
/*
 * recorder.c - see recorder.h.
 *
 * Rings: one per pool, filled under the pool's lock (so one producer at a
 * time) and drained by whoever holds trace_lock. head counts records
 * written, tail records drained; both only grow.
 *
 * Time: records carry the TSC on x86-64 (about 12 ns to read on an H200's
 * host, against 21 for clock_gettime) and are converted to nanoseconds
 * since the trace began when drained, at a rate measured once at open over
 * 10 ms (error about 1e-5). The TSC is invariant and synchronized across
 * cores on the CPUs CUDA runs on. Two reads per allocation/free pair were
 * 25 of the 36 ns that recording added to a 100 ns pair, which is why a
 * ring reads it only now and then (recorder.h). Order does not depend on
 * the clock: a pool's events are in its ring in lock order, and an address
 * moves between pools only through the driver, between a release stamped
 * before the segment is freed and a reserve stamped after it is allocated.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "process.h"
#include "log.h"
#include "recorder.h"
#include "safefile.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

enum { RING = SHIM_TRACE_RING };
enum { STAGE = 4096 };          /* records per write(2) */

typedef shim_trace_ring ring;

atomic_int shim_trace_state;
atomic_uint shim_trace_ticks;

static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(ring *) rings;
static int trace_fd = -1;           /* guarded by trace_lock */
static uint64_t trace_left;         /* bytes the file may still take; guarded
                                       by trace_lock (UINT64_MAX: no limit) */
static uint64_t t0;                 /* shim_trace_now() at open */
static uint64_t trace_max; /* CUPOOL_TRACE_MAX, for its message */
static double ns_per_tick = 1.0;

/* ---- time ---------------------------------------------------------------- */

uint64_t shim_trace_now(void)
{
#if defined(__x86_64__)
    return __rdtsc(); /* unfenced: order comes from the rings */
#else
    return shim_mono_ns();
#endif
}

static void calibrate(void)
{
#if defined(__x86_64__)
    uint64_t n0 = shim_mono_ns(), c0 = __rdtsc(), n1, c1;
    do {
        n1 = shim_mono_ns();
        c1 = __rdtsc();
    } while (n1 - n0 < 10000000u);
    ns_per_tick = c1 > c0 ? (double)(n1 - n0) / (double)(c1 - c0) : 1.0;
#endif
}

static uint64_t to_ns(uint64_t ticks)
{
    return ticks > t0 ? (uint64_t)((double)(ticks - t0) * ns_per_tick) : 0;
}

/* ---- draining ------------------------------------------------------------ */

/* Stops the trace (once): the file holds every record before. */
static void trace_stop(void)
{
    close(trace_fd);
    trace_fd = -1;
    atomic_store(&shim_trace_state, 0);
}

/* Writes all of buf (whole records after the header), or as many whole
 * records as CUPOOL_TRACE_MAX leaves room for, then stops the trace; on a
 * failure stops it too, and says so. Returns the bytes written. */
static size_t write_all(const void *buf, size_t n)
{
    const char *p = buf;
    size_t want = n;
    if (trace_fd >= 0 && n > trace_left)
        n = (size_t)trace_left / sizeof(trace_record) * sizeof(trace_record);
    size_t done = n;
    while (n && trace_fd >= 0) {
        ssize_t w = write(trace_fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            shim_log(SHIM_LOG_ERROR, "trace: write failed (%s); recording "
                     "stops here, the file holds every record before it",
                     w < 0 ? strerror(errno) : "no progress");
            trace_stop();
            return done - n;
        }
        p += w;
        n -= (size_t)w;
    }
    if (trace_fd < 0)
        return 0;
    trace_left -= done;
    if (done < want) {
        char c[32];
        shim_log(SHIM_LOG_WARN, "trace: the file reached CUPOOL_TRACE_MAX (%s); "
                 "recording stops here, the file holds every record before it "
                 "and the program runs on", stats_fmt_bytes(trace_max, c,
                 sizeof(c)));
        trace_stop();
    }
    return done;
}

/* Drains ring r to the file. Needs trace_lock. */
static void drain_locked(ring *r)
{
    static trace_record stage[STAGE];
    uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t lost = 0;
    while (tail < head) {
        size_t n = 0;
        for (; tail < head && n < STAGE; tail++) {
            stage[n] = r->rec[tail % RING];
            stage[n].time = to_ns(stage[n].time);
            n++;
        }
        size_t put = trace_fd >= 0 ? write_all(stage, n * sizeof(*stage)) / sizeof(*stage)
                                   : 0;
        if (put)
            shim_count_add(SHIM_trace_records, put);
        lost += n - put;
    }
    if (lost)
        shim_count_add(SHIM_trace_lost, lost);
    atomic_store_explicit(&r->tail, tail, memory_order_release);
    atomic_store_explicit(&r->woken, false, memory_order_relaxed);
}

/* Drains r now, taking the lock. */
static void ring_drain(ring *r)
{
    pthread_mutex_lock(&trace_lock);
    drain_locked(r);
    pthread_mutex_unlock(&trace_lock);
}

void shim_trace_drain(void)
{
    pthread_mutex_lock(&trace_lock);
    for (ring *r = atomic_load(&rings); r; r = r->next)
        drain_locked(r);
    pthread_mutex_unlock(&trace_lock);
}

void shim_trace_finish(void)
{
    if (!shim_tracing())
        return;
    /* From now on each record is written as it is made. A producer that
     * read the state just before this store may still be between that read
     * and publishing its record: a drain that ran meanwhile left the record
     * in the ring, and the program's end lost it (in 4 of about 140
     * SIGTERMs of test_trace_sigterm_loses_nothing). Holding the
     * ring's producers off waits that producer out; every later one reads
     * 2 and writes its own record. */
    atomic_store(&shim_trace_state, 2);
    for (ring *r = atomic_load(&rings); r; r = r->next) {
        if (r->hold)
            r->hold(r->hold_ctx, r, ring_drain);
        else
            ring_drain(r);
    }
}

/* ---- recording ----------------------------------------------------------- */

ring *shim_trace_ring_new(shim_trace_hold_fn *hold, void *ctx)
{
    /* Populated now: a page fault per 170 records on the allocation path
     * cost more than the record itself (+50% on a 512-byte pair measured
     * on an H200's host). */
    ring *r = mmap(NULL, sizeof(*r), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (r == MAP_FAILED) {
        shim_log(SHIM_LOG_WARN, "trace: no memory for a %zu-KiB buffer: "
                 "this pool's events are written one by one",
                 sizeof(*r) >> 10);
        return NULL;
    }
    r->left = 1; /* read the clock at the first record */
    r->limit = RING / 2;
    r->hold = hold;
    r->hold_ctx = ctx;
    r->next = atomic_load(&rings);
    while (!atomic_compare_exchange_weak(&rings, &r->next, r))
        ;
    return r;
}

/* Makes room in r and sets a new limit. */
static void ring_room(ring *r, uint64_t head)
{
    /* Past half the ring since tail was last read: wake the helper; if it
     * is full, drain it here rather than drop anything. */
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (head - tail == RING) {
        ring_drain(r);
        tail = head;
    } else if (head - tail >= RING / 2 &&
               !atomic_exchange_explicit(&r->woken, true, memory_order_relaxed)) {
        shim_helper_wake();
    }
    r->limit = head - tail >= RING / 2 ? tail + RING : tail + RING / 2;
}

void shim_trace_put_slow(ring *r, trace_op op, trace_result res, int dev,
                         uint64_t addr, uint64_t size)
{
    if (!r) {
        shim_trace_event(op, res, dev, addr, size);
        return;
    }
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (head >= r->limit)
        ring_room(r, head);
    /* Never behind a record before it: the lock's last holder may have
     * read a TSC a few ns ahead on another core. */
    uint64_t now = shim_trace_now();
    r->stamp = now > r->stamp ? now : r->stamp;
    r->left = SHIM_TRACE_EVERY;
    r->tick = atomic_load_explicit(&shim_trace_ticks, memory_order_relaxed);
    shim_trace_ring_store(r, head, op, res, dev, addr, size);
    if (shim_tracing() == 2)
        ring_drain(r);
}

void shim_trace_event(trace_op op, trace_result res, int dev, uint64_t addr,
                      uint64_t size)
{
    if (!shim_tracing())
        return;
    pthread_mutex_lock(&trace_lock);
    trace_record rec = {.time = to_ns(shim_trace_now()), .addr = addr,
                        .word = trace_word(op, res, (unsigned)dev, size)};
    shim_count(trace_fd >= 0 && write_all(&rec, sizeof(rec)) ? SHIM_trace_records
                                                              : SHIM_trace_lost);
    pthread_mutex_unlock(&trace_lock);
}

/* ---- life cycle ---------------------------------------------------------- */

/* Opens path for this process's recording: a new file, renamed into
 * place (safefile_replace: never through a link another user chose, and
 * whatever had the name, or another name of it, is never truncated), and
 * only if no other process records to it (an exclusive lock held for the
 * process's life: a child that inherited CUPOOL_TRACE finds the parent's
 * file locked and leaves it alone). Returns the descriptor, or -1 after
 * saying why. */
static int trace_file_open(const char *path)
{
    const char *why = NULL;
    char shown[SHIM_PATH_MAX + 32];
    int fd = safefile_replace(path, &why);
    if (fd < 0) {
        shim_log(SHIM_LOG_ERROR, "CUPOOL_TRACE file %s: %s; this process records "
                 "nothing", text_printable(path, shown, sizeof(shown)), why);
        return -1;
    }
    fcntl(fd, F_SETFL, 0); /* blocking writes from here */
    return fd;
}

void shim_trace_open(const char *pattern, uint64_t max)
{
    char path[SHIM_PATH_MAX + 32];
    if (shim_path_expand(pattern, (int)getpid(), path, sizeof(path))) {
        char shown[SHIM_PATH_MAX];
        shim_log(SHIM_LOG_ERROR, "CUPOOL_TRACE=%s: path too long; not "
                 "recording", text_printable(pattern, shown, sizeof(shown)));
        return;
    }
    int fd = trace_file_open(path);
    if (fd < 0)
        return;
    char comm[16];
    shim_comm(comm, sizeof(comm));
    trace_header h;
    trace_header_init(&h, (int)getpid(), comm, shim_unix_ns(), TRACE_SRC_SHIM);
    calibrate();
    t0 = shim_trace_now();
    pthread_mutex_lock(&trace_lock);
    trace_fd = fd;
    trace_max = max;
    trace_left = max ? max : UINT64_MAX;
    if (trace_left < sizeof(h))
        trace_left = sizeof(h);
    write_all(&h, sizeof(h));
    pthread_mutex_unlock(&trace_lock);
    if (trace_fd >= 0) {
        atomic_store(&shim_trace_state, 1);
        char shown[SHIM_PATH_MAX + 32];
        shim_log(SHIM_LOG_INFO, "recording allocation events to %s",
                 text_printable(path, shown, sizeof(shown)));
    }
}

void shim_trace_after_fork(void)
{
    /* The child is single-threaded here; the file is the parent's. Its
     * descriptor is closed (the lock stays the parent's: it belongs to the
     * open file, which the parent still holds). */
    atomic_store(&shim_trace_state, 0);
    if (trace_fd >= 0)
        close(trace_fd);
    trace_fd = -1;
}
