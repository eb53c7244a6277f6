/* SPDX-License-Identifier: Apache-2.0 */
/*
 * process.h - what the whole process shares, below every other part of
 * the shim that needs it: the options as loaded, whether cupool is active,
 * whether this thread is inside cupool's own CUDA calls, the process-wide
 * counters, the process name, the clocks, the helper thread's doorbell and
 * the hook that starts it. It calls nothing of the
 * shim, so the layers above it (recorder.c < device.c < control.c <
 * interpose*.c) never need to call upward.
 */
#ifndef CUPOOL_SHIM_PROCESS_H
#define CUPOOL_SHIM_PROCESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "stats.h"

/* The options, loaded once at start-up (control.c's constructor). */
extern shim_config shim_cfg;

/* Nonzero while the calling thread is inside the shim (or inside a real
 * CUDA call the shim made): every interposed entry point then goes straight
 * to the real function, so an allocation is served exactly once and the
 * pool's own calls reach CUDA. Hidden, so that every file reaches it the
 * cheap way (the local-dynamic TLS model: no lookup by name). */
extern __attribute__((visibility("hidden"))) _Thread_local int shim_inside;

/* True once the shim is loaded, enabled, and this is not a forked child. */
bool shim_active(void);
void shim_set_active(bool on);

/* Process-wide counters: the fields of stats_process. */
enum shim_counter {
#define SHIM_X_ENUM(name, unit, kind, help) SHIM_##name,
    STATS_PROCESS_FIELDS(SHIM_X_ENUM)
#undef SHIM_X_ENUM
    SHIM_NCOUNTERS
};

void shim_count(enum shim_counter c);
void shim_count_add(enum shim_counter c, uint64_t n);
/* Sets a GAUGE field. */
void shim_gauge_set(enum shim_counter c, uint64_t v);
uint64_t shim_counter(enum shim_counter c);

/* This process's name (/proc/self/comm, without the newline; "" if it
 * cannot be read) into buf of len bytes. */
void shim_comm(char *buf, size_t len);

/* CLOCK_REALTIME in nanoseconds since the epoch. */
uint64_t shim_unix_ns(void);
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t shim_mono_ns(void);

/* The helper thread's doorbell: a pipe whose bytes are a signal number,
 * SHIM_WAKE_DRAIN or SHIM_WAKE_LANDED (a flush its asker stopped waiting
 * for has run: framework.h). Written by signal handlers
 * (async-signal-safe), by shim_helper_wake and by the flush worker; read
 * by the helper. */
enum { SHIM_WAKE_DRAIN = 0, SHIM_WAKE_LANDED = 255 };
/* Makes the pipe (close-on-exec, writes non-blocking). 0 or -errno. */
int shim_doorbell_open(void);
/* Its read and write ends; -1 while there is none. */
int shim_doorbell_rd(void);
int shim_doorbell_wr(void);
/* Closes both ends (a forked child). */
void shim_doorbell_close(void);

/* Whether the helper thread runs (set by control.c). */
void shim_helper_set_running(bool on);
bool shim_helper_running(void);

/* Asks the helper thread to drain the trace rings now (never blocks). */
void shim_helper_wake(void);

/* Registers what starts the helper thread (control.c, at start-up), and
 * runs it (device.c, when a pool is made; idempotent as the hook is). */
void shim_on_first_pool(void (*start)(void));
void shim_first_pool(void);

#endif
