/* SPDX-License-Identifier: Apache-2.0 */
/*
 * framework.h - a flush, run by its own worker thread: the frameworks'
 * caches first, then cupool's.
 *
 * A Python program's framework (PyTorch's caching allocator, CuPy's memory
 * pool) keeps the memory its tensors freed: cupool sees those bytes as
 * allocated and cannot give them back. When the process runs a CPython
 * interpreter (found with dlsym, never linked), the worker takes the
 * interpreter's lock (PyGILState_Ensure, as any thread of the program
 * may) and asks the frameworks the program imported to release their
 * caches, as framework.c's table says (torch.cuda.empty_cache() on each
 * device PyTorch holds memory on, and ipc_collect(), once the program
 * initialized CUDA through it; CuPy's default memory and pinned pools'
 * free_all_blocks(); ...). Then it returns
 * cupool's own cached segments to the driver. Nothing is imported, no
 * device is initialized; nothing runs while the interpreter is not
 * initialized or is finalizing, or in a forked child.
 *
 * The main thread has no part in it: a program sleeping, waiting on a
 * socket, a lock, an event or its input holds no lock, and is flushed at
 * once. A program running Python gives the lock up within its switch
 * interval (5 ms by default), in every CPython version. One holding it in
 * a long C call is waited for: the asker waits SHIM_FRAMEWORK_WAIT_MS,
 * then is answered "late", and the flush runs when the lock comes free
 * and is counted then (SHIM_WAKE_LANDED).
 *
 * A flush never runs during a CUDA graph capture: with CUDA's default
 * (global) capture mode, a cudaFree or a synchronization from another
 * thread would invalidate it. The worker waits until no capture is open,
 * closes capture.h's gate so that none begins, runs the flush, and opens
 * the gate again: a flush asked during a capture lands the moment the
 * last capture ends.
 */
#ifndef CUPOOL_SHIM_FRAMEWORK_H
#define CUPOOL_SHIM_FRAMEWORK_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "stats.h"

typedef enum shim_framework_status {
    SHIM_FW_OFF,      /* CUPOOL_FRAMEWORK_FLUSH=0 */
    SHIM_FW_NO_PYTHON,/* no interpreter, or not running (start, end) */
    SHIM_FW_DONE,     /* ran */
    SHIM_FW_LATE      /* not run in time: it runs when it can */
} shim_framework_status;

/* What a late flush waits for. */
typedef enum shim_framework_wait {
    SHIM_FW_WAIT_NONE,
    SHIM_FW_WAIT_CAPTURE, /* a graph capture to end */
    SHIM_FW_WAIT_GIL,     /* the interpreter's lock, held in a long call */
    SHIM_FW_WAIT_THREAD   /* no worker thread could be started */
} shim_framework_wait;

/* The frameworks a flush releases, stats.h's STATS_FRAMEWORKS:
 * SHIM_FRAMEWORK_<name> indexes a result's released and seen. */
enum shim_framework {
#define SHIM_FRAMEWORK_ENUM(X, name, label, help) SHIM_FRAMEWORK_##name,
    STATS_FRAMEWORKS(SHIM_FRAMEWORK_ENUM, _)
#undef SHIM_FRAMEWORK_ENUM
    SHIM_NFRAMEWORKS
};

typedef struct shim_framework_result {
    shim_framework_status status;
    shim_framework_wait waiting; /* SHIM_FW_LATE: for what */
    bool skipped;     /* conditional, and not worth it: nothing released */
    bool deferred;    /* waited for a graph capture to end */
    uint64_t own;     /* bytes cupool returned to the driver */
    uint64_t took_ns; /* from the request to the flush's end */
    uint64_t released[SHIM_NFRAMEWORKS]; /* bytes each framework gave back */
    bool seen[SHIM_NFRAMEWORKS];  /* each in use: imported (and, for some,
                                     on the GPU: framework.c's table) */
    const char *unable; /* the name of a framework in use whose memory
                           cannot be given back ("JAX"), or NULL */
    bool failed;      /* a framework's call raised (the program unharmed) */
} shim_framework_result;

/* PyTorch's own view of its memory, per device, as the program's main
 * thread last read it. */
typedef struct shim_framework_view {
    uint64_t taken_ns;                  /* CLOCK_REALTIME; 0 = never read */
    uint64_t allocated[SHIM_MAX_DEVICES];
    uint64_t reserved[SHIM_MAX_DEVICES];
    uint64_t inactive[SHIM_MAX_DEVICES];
} shim_framework_view;

/* The wait for the flush worker, in milliseconds. */
#define SHIM_FRAMEWORK_WAIT_MS 2000

/* Flushes: the frameworks' caches, then cupool's, in the worker, waiting
 * for it at most SHIM_FRAMEWORK_WAIT_MS. want 0 flushes everything; a
 * nonzero want (a group member's shortfall, asked again while it waits)
 * flushes only what is worth it: a framework whose unused cache is at
 * least min(want, half of what it reserves), and cupool's cache likewise.
 * A flush already under way is joined, not repeated. On SHIM_FW_LATE the
 * flush still runs later and is then collected with
 * shim_framework_landed. From the helper thread, with no lock of
 * cupool's held. */
void shim_framework_flush(uint64_t want, shim_framework_result *r);

/* A late flush that ran since: true with its result (status DONE) into
 * *r, once. Helper thread, on SHIM_WAKE_LANDED. */
bool shim_framework_landed(shim_framework_result *r);

/* Asks the worker for PyTorch's figures, without waiting, unless the
 * newest reading is under a second old. True while a reading is on its
 * way. Helper thread only. */
bool shim_framework_view_ask(void);

/* Reads PyTorch's figures now, waiting as a flush does. Helper thread
 * only. */
void shim_framework_view_now(void);

/* The newest reading (flushes take one too). Any thread. */
void shim_framework_view_get(shim_framework_view *v);

/* Whether the process's interpreter, seen running before, is finalizing
 * or finalized: the program is done, and its framework's cache goes only
 * with the process. */
bool shim_framework_ending(void);

#endif
