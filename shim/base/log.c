/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - see log.h. The rate limit is a token bucket: a burst of 20
 * messages, then 5 a second; what it drops is counted and reported with the
 * next message that passes.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

enum { BURST = 20, PER_SECOND = 5 };

static _Atomic int level = SHIM_LOG_WARN;
static atomic_flag busy = ATOMIC_FLAG_INIT;
static double tokens = BURST, last;
static unsigned long dropped;

void shim_log_set_level(shim_log_level l) { atomic_store(&level, (int)l); }

/* Takes a token; returns the number of messages dropped before this one,
 * or -1 if this one must be dropped too. */
static long take_token(void)
{
    while (atomic_flag_test_and_set(&busy))
        ;
    double t = clock_mono_s();
    tokens += (t - last) * PER_SECOND;
    if (tokens > BURST)
        tokens = BURST;
    last = t;
    long r;
    if (tokens >= 1) {
        tokens -= 1;
        r = (long)dropped;
        dropped = 0;
    } else {
        dropped++;
        r = -1;
    }
    atomic_flag_clear(&busy);
    return r;
}

/* Copies text into out, prefixing every line with "cupool: ". */
static size_t prefix_lines(const char *text, char *out, size_t cap)
{
    size_t n = 0;
    const char *p = text;
    while (*p && n + 9 < cap) {
        memcpy(out + n, "cupool: ", 8);
        n += 8;
        while (*p && *p != '\n' && n + 1 < cap)
            out[n++] = *p++;
        out[n++] = '\n';
        if (*p == '\n')
            p++;
    }
    return n;
}

static void vlog(shim_log_level l, bool limited, const char *fmt, va_list ap)
{
    if ((int)l > atomic_load(&level) || l == SHIM_LOG_OFF)
        return;
    long was_dropped = limited ? take_token() : 0;
    if (was_dropped < 0)
        return;
    char text[2048], out[2560];
    int k = 0;
    if (was_dropped > 0)
        k = snprintf(text, sizeof(text), "(%ld messages suppressed)\n",
                     was_dropped);
    vsnprintf(text + k, sizeof(text) - (size_t)k, fmt, ap);
    size_t n = prefix_lines(text, out, sizeof(out));
    ssize_t w = write(STDERR_FILENO, out, n);
    (void)w;
}

void shim_log(shim_log_level l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(l, true, fmt, ap);
    va_end(ap);
}

void shim_log_always(shim_log_level l, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(l, false, fmt, ap);
    va_end(ap);
}
