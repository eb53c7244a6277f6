/*
 * control.h - the shim's life cycle and its outside controls: options read
 * at load, the flush and statistics signals (a handler that writes one byte
 * to a pipe, a helper thread that does the work), fork safety, process-wide
 * counters, the live page, the statistics dump and the out-of-memory
 * report.
 */
#ifndef CUPOOL_SHIM_CONTROL_H
#define CUPOOL_SHIM_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stats.h"

/* Process-wide counters: the fields of stats_process. */
enum shim_counter {
#define SHIM_X_ENUM(name, unit, kind, help) SHIM_##name,
    STATS_PROCESS_FIELDS(SHIM_X_ENUM)
#undef SHIM_X_ENUM
    SHIM_NCOUNTERS
};

/* True once the shim is loaded, enabled, and this is not a forked child. */
bool shim_active(void);

void shim_count(enum shim_counter c);
void shim_count_add(enum shim_counter c, uint64_t n);

/* Starts the helper thread if it is not running (idempotent). */
void shim_helper_start(void);

/* Asks the helper thread to drain the trace rings now (never blocks). */
void shim_helper_wake(void);

/* Logs the out-of-memory (or other) report for a failed allocation by
 * call (cudaMalloc, cuMemAlloc). */
void shim_report_alloc_failure(int dev, size_t size, int err, const char *call);

/* This process's name (/proc/self/comm, without the newline; "" if it
 * cannot be read) into buf of len bytes. */
void shim_comm(char *buf, size_t len);

/* CLOCK_REALTIME in nanoseconds since the epoch. */
uint64_t shim_unix_ns(void);
/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t shim_mono_ns(void);

/* Records a block exported for IPC on the live page (stats_page_export):
 * 0, or -ENOENT if this process has no page. */
int shim_ipc_export(const void *handle, uint64_t offset, uint64_t size, int dev,
                    uint32_t *slot, uint64_t *nonce);

/* Fills *v with this process's current statistics. */
void shim_stats_view(stats_view *v);

#endif
