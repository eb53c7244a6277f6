/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.h - the one clock every layer reads: monotonic time for how long
 * something took or may take, wall time for a stamp another process or a
 * person reads.
 */
#ifndef CUPOOL_COMMON_CLOCK_H
#define CUPOOL_COMMON_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in nanoseconds, and in seconds. */
uint64_t clock_mono_ns(void);
double clock_mono_s(void);

/* CLOCK_REALTIME in nanoseconds since the epoch. */
uint64_t clock_unix_ns(void);

#endif
