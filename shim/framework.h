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

/* The wait for the main thread, in milliseconds. */
#define SHIM_FRAMEWORK_WAIT_MS 2000

/* Releases the frameworks' caches in the main thread and waits for it (at
 * most SHIM_FRAMEWORK_WAIT_MS, then longer only while the release is
 * already running). From the helper thread, with no lock of cupool's
 * held. */
void shim_framework_release(shim_framework_result *r);

#endif
