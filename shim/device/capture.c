/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capture.c - see capture.h.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "capture.h"
#include "devstate.h"
#include "log.h"
#include "process.h"

/* Captures begun and not ended (shim_capture_begin). Changed under
 * gate_lock, read without it. */
static atomic_int captures;

/* The gate a flush closes while no capture is open, so that none begins
 * while it runs (shim_capture_gate_close). */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_closed;

bool shim_captures_counted(void) { return atomic_load(&captures) != 0; }

bool shim_capture_gate_wait(void)
{
    bool waited = false;
    pthread_mutex_lock(&gate_lock);
    while (atomic_load(&captures) != 0 || gate_closed) {
        waited |= atomic_load(&captures) != 0;
        pthread_cond_wait(&gate_cond, &gate_lock);
    }
    pthread_mutex_unlock(&gate_lock);
    return waited;
}

bool shim_capture_gate_close(void)
{
    pthread_mutex_lock(&gate_lock);
    bool ok = atomic_load(&captures) == 0 && !gate_closed;
    if (ok)
        gate_closed = true;
    pthread_mutex_unlock(&gate_lock);
    return ok;
}

void shim_capture_gate_open(void)
{
    pthread_mutex_lock(&gate_lock);
    gate_closed = false;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

void shim_capture_begin(void)
{
    pthread_mutex_lock(&gate_lock);
    while (gate_closed)
        pthread_cond_wait(&gate_cond, &gate_lock);
    atomic_fetch_add(&captures, 1);
    pthread_mutex_unlock(&gate_lock);
    /* A fence that read no capture holds its device's lock until its CUDA
     * calls are in: wait for any such fence before the capture begins. */
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        if (!shim_device_shard_if_any(i, 0))
            continue;
        pthread_mutex_lock(&shim_devices[i].lock);
        pthread_mutex_unlock(&shim_devices[i].lock);
    }
}

void shim_capture_end(void)
{
    pthread_mutex_lock(&gate_lock);
    if (atomic_fetch_sub(&captures, 1) == 1)
        pthread_cond_broadcast(&gate_cond); /* a flush waits for none */
    pthread_mutex_unlock(&gate_lock);
}

/* ---- capture modes ------------------------------------------------------------
 * The captures going on, with their mode and thread: what CUDA checks
 * before a potentially unsafe call (cudaMalloc, cudaFree). Looked at only
 * while a capture is counted. */

enum { MAX_CAPTURES = 64 };
static struct { void *stream; int mode; pthread_t thread; bool used; } open_captures[MAX_CAPTURES];
static pthread_mutex_t captures_lock = PTHREAD_MUTEX_INITIALIZER;

void shim_capture_note(void *stream, int mode)
{
    pthread_mutex_lock(&captures_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (!open_captures[i].used) {
            open_captures[i].stream = stream;
            open_captures[i].mode = mode;
            open_captures[i].thread = pthread_self();
            open_captures[i].used = true;
            break;
        }
    }
    pthread_mutex_unlock(&captures_lock);
}

void shim_capture_ended(void *stream)
{
    pthread_mutex_lock(&captures_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (open_captures[i].used && open_captures[i].stream == stream) {
            open_captures[i].used = false;
            break;
        }
    }
    pthread_mutex_unlock(&captures_lock);
    shim_capture_end();
}

bool shim_capture_forbids(int thread_mode)
{
    if (atomic_load(&captures) == 0 || thread_mode == cudaStreamCaptureModeRelaxed)
        return false;
    bool own = false, other_global = false;
    pthread_t me = pthread_self();
    pthread_mutex_lock(&captures_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (!open_captures[i].used || open_captures[i].mode == cudaStreamCaptureModeRelaxed)
            continue;
        if (pthread_equal(open_captures[i].thread, me))
            own = true;
        else if (open_captures[i].mode == cudaStreamCaptureModeGlobal)
            other_global = true;
    }
    pthread_mutex_unlock(&captures_lock);
    return own || (thread_mode == cudaStreamCaptureModeGlobal && other_global);
}

bool shim_captures_open(void)
{
    return atomic_load_explicit(&captures, memory_order_relaxed) != 0;
}

bool shim_capture_starts(void)
{
    bool counted = !shim_inside && shim_active();
    if (counted)
        shim_capture_begin();
    return counted;
}

void shim_capture_started(bool counted, bool begun, void *stream, bool per_thread, int mode)
{
    /* To the per-thread forms, stream 0 is the calling thread's stream (the
     * runtime's cudaStreamPerThread is the driver's CU_STREAM_PER_THREAD). */
    if (counted && begun)
        shim_capture_note(per_thread && !stream ? (void *)cudaStreamPerThread : stream, mode);
    else if (counted)
        shim_capture_end();
}

/* The calling thread's capture mode, read without changing it, through the
 * runtime or the driver; CUDA's default (global) if it cannot tell. */
static int thread_mode(bool driver)
{
    int m = cudaStreamCaptureModeRelaxed;
    if (!(driver ? &shim_cuda_driver : &shim_cuda_runtime)->exchange_mode(&m))
        return cudaStreamCaptureModeGlobal;
    int back = m;
    (driver ? &shim_cuda_driver : &shim_cuda_runtime)->exchange_mode(&back);
    return m;
}

bool shim_capture_refuses(const char *call, bool driver)
{
    if (!shim_captures_open() || !shim_capture_forbids(thread_mode(driver)))
        return false;
    shim_log(SHIM_LOG_ERROR, "%s during a graph capture that forbids it (a capture "
             "in global or thread-local mode): CUDA refuses it, as without cupool "
             "(operation not permitted when stream is capturing). PyTorch's CUDA "
             "graphs need its caching allocator: run them without --torch", call);
    return true;
}
