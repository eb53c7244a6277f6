/* SPDX-License-Identifier: Apache-2.0 */
/*
 * park.h - the helper thread's side of cupool pause's own move
 * (STATS_REQ_PARK, STATS_REQ_UNPARK): the program's CUDA calls stopped at
 * their entry (watch/cudagate.h) and its devices' work waited for, the
 * memory of every VMM segment copied to pinned host memory by several
 * threads, each with its own stream per device, then released with every
 * address kept (device/vmm_park.h); and back: backed again at the same
 * addresses, copied in, the calls let go. The driver's checkpoint moves
 * what is left (the context, memory cupool does not serve).
 *
 * A park refuses, with nothing moved and the program running on, where
 * the process has no VMM segment (CUPOOL_VMM=1, --torch), CUPTI cannot
 * watch its calls (CUPOOL_CUPTI=0, the program took CUPTI), a graph
 * capture is under way, a thread stays inside a CUDA call, or host memory
 * or a copy fails. An unpark that fails (the device is full: another
 * process took it) leaves the process parked, its bytes in host memory,
 * for the next try. The pinned host memory is kept for the next pause.
 */
#ifndef CUPOOL_SHIM_PARK_H
#define CUPOOL_SHIM_PARK_H

#include <stdbool.h>

#include "stats.h"

/* Parks (out) or brings back (!out). Helper thread. */
void shim_park_serve(bool out);

/* Whether parked now (the helper then flushes nothing). */
bool shim_park_parked(void);

/* The last request's outcome, into p. */
void shim_park_view(stats_park *p);

#endif
