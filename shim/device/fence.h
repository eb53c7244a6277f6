/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fence.h - the fence: a block freed by the program is handed to new work
 * only once the GPU work queued before its free cannot still use it.
 *
 * One of four modes (docs/DESIGN.md, "The fence"):
 *   barrier  GPU-side, the host never waits: each tracked non-blocking
 *            stream records an event the legacy stream waits on; the legacy
 *            stream records one event every non-blocking stream waits on.
 *            Blocking streams and per-thread default streams are ordered by
 *            the legacy stream itself.
 *   poll     a fence records an event on the legacy stream and on each
 *            tracked non-blocking stream, and makes no stream wait: the
 *            blocks freed before it are reused once those have completed
 *            (event queries; the host never waits), or, when only the
 *            legacy event is still running, once the non-blocking streams
 *            were made to wait for it (ordered). Before the pool grows, the
 *            oldest fence is forced done: the legacy stream waits for that
 *            fence's events, not for work queued since, and the
 *            non-blocking streams for the legacy stream. When the pool
 *            cannot grow at all, a barrier.
 *   sync     cudaDeviceSynchronize, as the real cudaFree would have done,
 *            but only when a block freed since the last fence is reused.
 *   none     no fence (only for programs known to use one stream).
 * With CUPOOL_CUPTI, a fence is skipped when no GPU work was submitted
 * since the device's last one (cupti.h): that one orders every block freed
 * since.
 * No fence is issued while a graph is being captured: the fence answers
 * -EAGAIN and the pool serves the request from a new segment instead. While
 * a capture begun through the interposed runtime is open, the fence checks
 * the legacy and every tracked stream, in relaxed capture mode so that it
 * can never break a capture on another thread; while none is, it skips those
 * checks (capture.h).
 */
#ifndef CUPOOL_SHIM_FENCE_H
#define CUPOOL_SHIM_FENCE_H

#include <stdbool.h>
#include <stdint.h>

#include "seam.h"

/* The pool backend's fence operations (pool.h), ctx a shim_shard. */
int shim_fence_full(void *ctx);
int shim_fence_begin(void *ctx, uint64_t *ticket);
int shim_fence_poll(void *ctx, bool force, uint64_t *done);

/* A stream owing its order pays it (comm.h's pay: shim_comm_on_pay). */
bool shim_fence_pay(int dev, void *s);

/* Stream tracking for the fence. */
void shim_device_track_stream(int dev, cudaStream_t s, unsigned int flags);
void shim_device_untrack_stream(cudaStream_t s);

#endif
