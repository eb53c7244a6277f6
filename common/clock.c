/* SPDX-License-Identifier: Apache-2.0 */
/*
 * clock.c - see clock.h.
 */
#include <time.h>

#include "clock.h"

static uint64_t ns_of(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

uint64_t clock_mono_ns(void) { return ns_of(CLOCK_MONOTONIC); }

double clock_mono_s(void) { return (double)clock_mono_ns() / 1e9; }

uint64_t clock_unix_ns(void) { return ns_of(CLOCK_REALTIME); }
