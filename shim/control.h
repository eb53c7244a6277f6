/*
 * control.h - the shim's life cycle and its outside controls: options read
 * at load, the flush and statistics signals (a handler that writes one byte
 * to a pipe, a helper thread that does the work), fork safety, process-wide
 * counters, the statistics line and the out-of-memory report.
 */
#ifndef CUPOOL_SHIM_CONTROL_H
#define CUPOOL_SHIM_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHIM_COUNTER_LIST(X)                                                  \
    X(FOREIGN_FREES, foreign_frees, "cudaFree of pointers no pool owns")      \
    X(PASS_PITCH, passthrough_pitch, "cudaMallocPitch calls passed through")  \
    X(PASS_3D, passthrough_3d, "cudaMalloc3D calls passed through")           \
    X(PASS_MANAGED, passthrough_managed, "cudaMallocManaged calls passed through") \
    X(PASS_ASYNC, passthrough_async, "cudaMallocAsync calls passed through")  \
    X(SIGNAL_FLUSHES, signal_flushes, "flushes asked for by signal")          \
    X(FLUSHED_BYTES, flushed_bytes, "bytes returned by signal flushes")       \
    X(OOM_REPORTS, oom_reports, "allocation failures reported")

enum shim_counter {
#define SHIM_X_ENUM(id, name, doc) SHIM_##id,
    SHIM_COUNTER_LIST(SHIM_X_ENUM)
#undef SHIM_X_ENUM
    SHIM_NCOUNTERS
};

/* True once the shim is loaded, enabled, and this is not a forked child. */
bool shim_active(void);

void shim_count(enum shim_counter c);
void shim_count_add(enum shim_counter c, uint64_t n);

/* Starts the helper thread if it is not running (idempotent). */
void shim_helper_start(void);

/* Logs the out-of-memory (or other) report for a failed cudaMalloc. */
void shim_report_alloc_failure(int dev, size_t size, int err);

/* Writes one JSON line of statistics into buf; returns its length. */
size_t shim_stats_json(char *buf, size_t len);

#endif
