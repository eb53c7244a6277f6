/* SPDX-License-Identifier: Apache-2.0 */
/*
 * capture.h - graph captures, as the fence and the allocation calls must
 * see them: how many are open (the fence checks streams for a capture only
 * while one may be going on), and each one's stream, mode and thread (what
 * CUDA checks before a potentially unsafe call such as cudaMalloc).
 */
#ifndef CUPOOL_SHIM_CAPTURE_H
#define CUPOOL_SHIM_CAPTURE_H

#include <stdbool.h>

/* Graph captures begun through the interposed runtime and not yet ended.
 * While there are none, the fence skips its capture checks (four CUDA calls,
 * 140 ns on an H200). shim_capture_begin is called before the real begin:
 * it returns once no fence that could have missed it is still running. */
void shim_capture_begin(void);
void shim_capture_end(void);

/* A capture begun on stream (the per-thread stream resolved) in mode (a
 * cudaStreamCaptureMode; the driver's enum agrees), by the calling thread;
 * shim_capture_ended undoes it and shim_capture_end. */
void shim_capture_note(void *stream, int mode);
void shim_capture_ended(void *stream);

/* Whether a capture counted now. */
bool shim_captures_open(void);

/* Around a real capture begin (runtime or driver): shim_capture_starts
 * counts it beforehand (false if the shim does not: inside it, or off);
 * shim_capture_started notes its stream and mode if it began, else uncounts
 * it. */
bool shim_capture_starts(void);
void shim_capture_started(bool counted, bool begun, void *stream, bool per_thread, int mode);

/* True (after one line naming the cause) if a graph capture forbids the
 * calling thread the allocation call named call now (shim_capture_forbids,
 * with the thread's mode read through the driver or the runtime). */
bool shim_capture_refuses(const char *call, bool driver);

/* Whether CUDA forbids the calling thread, whose capture mode is
 * thread_mode, a potentially unsafe call (cudaMalloc, cudaFree) now: a
 * capture of its own not in relaxed mode, or, in global mode, another
 * thread's capture in global mode (cudaThreadExchangeStreamCaptureMode). */
bool shim_capture_forbids(int thread_mode);

/* The flush's gate. With PyTorch's default (global) capture mode, a
 * cudaFree or a synchronization from another thread invalidates a capture
 * under way: a flush runs only while none is, and none begins while it
 * runs. shim_capture_gate_wait returns once no capture is open and the
 * gate is open (it may take as long as the program's captures), true if a capture was open; shim_capture_gate_close
 * closes the gate if none is open now (false: one is, or the gate is
 * closed already), after which a capture's begin waits in
 * shim_capture_begin until shim_capture_gate_open. The caller of close
 * must not wait for anything a capturing thread holds (the GIL included)
 * until it opens the gate again. */
bool shim_capture_gate_wait(void);
bool shim_capture_gate_close(void);
void shim_capture_gate_open(void);

/* Whether a capture is counted now, read in full order: for the fence,
 * which reads it under a device's lock (see shim_capture_begin). */
bool shim_captures_counted(void);

#endif
