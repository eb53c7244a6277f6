/*
 * framework.h - the frameworks' own caches in a flush.
 *
 * A Python program's framework (PyTorch's caching allocator, CuPy's memory
 * pool) keeps the memory its tensors freed: cupool sees those bytes as
 * allocated and cannot give them back. When the process runs a CPython
 * interpreter (found with dlsym, never linked), a flush first asks the
 * interpreter, through Py_AddPendingCall, to release those caches in the
 * program's main thread at its next safe point, as CPython runs its own
 * signal handlers: torch.cuda.empty_cache() and ipc_collect() when the
 * program imported torch and initialized CUDA through it; CuPy's default
 * memory and pinned pools' free_all_blocks() when it imported cupy. Nothing
 * is imported, no device is initialized; nothing runs while the
 * interpreter is not initialized or is finalizing, or in a forked child.
 * The wait is bounded: a main thread blocked in a long C call is answered
 * "late", and its request is withdrawn, so it never runs later by
 * surprise.
 */
#ifndef CUPOOL_SHIM_FRAMEWORK_H
#define CUPOOL_SHIM_FRAMEWORK_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"

typedef enum shim_framework_status {
    SHIM_FW_OFF,      /* CUPOOL_FRAMEWORK_FLUSH=0 */
    SHIM_FW_NO_PYTHON,/* no interpreter, or not running (start, end) */
    SHIM_FW_DONE,     /* ran in the main thread */
    SHIM_FW_LATE,     /* the main thread reached no safe point in time */
    SHIM_FW_REFUSED   /* the interpreter took no pending call */
} shim_framework_status;

typedef struct shim_framework_result {
    shim_framework_status status;
    uint64_t torch;   /* bytes torch.cuda.empty_cache gave back */
    uint64_t cupy;    /* bytes CuPy's device pool gave back */
    bool torch_seen;  /* torch imported, CUDA initialized through it */
    bool cupy_seen;   /* cupy imported */
    bool jax_seen;    /* jax imported: its memory cannot be given back */
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

/* The wait for the main thread, in milliseconds. */
#define SHIM_FRAMEWORK_WAIT_MS 2000

/* Releases the frameworks' caches in the main thread and waits for it (at
 * most SHIM_FRAMEWORK_WAIT_MS, then longer only while the release is
 * already running). From the helper thread, with no lock of cupool's
 * held. */
void shim_framework_release(shim_framework_result *r);

/* Asks the main thread for PyTorch's figures, without waiting, unless the
 * newest reading is under a second old; collects a reading that came in.
 * True while a reading is on its way. Helper thread only. */
bool shim_framework_view_ask(void);

/* Reads PyTorch's figures now, waiting as a release does. Helper thread
 * only. */
void shim_framework_view_now(void);

/* The newest reading (flushes take one too). Any thread. */
void shim_framework_view_get(shim_framework_view *v);

/* Whether the process's interpreter, seen running before, is finalizing
 * or finalized: the program is done, and its framework's cache goes only
 * with the process. */
bool shim_framework_ending(void);

#endif
