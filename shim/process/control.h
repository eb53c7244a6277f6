/* SPDX-License-Identifier: Apache-2.0 */
/*
 * control.h - the shim's life cycle and its outside controls: options read
 * at load, the flush and statistics signals (a handler that writes one byte
 * to the doorbell, a helper thread that does the work), fork safety, the
 * live page, the statistics dump and the out-of-memory report. Above
 * device.c and recorder.c (it calls them; they never call it: what they
 * share with it is in process.h).
 */
#ifndef CUPOOL_SHIM_CONTROL_H
#define CUPOOL_SHIM_CONTROL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "process.h"
#include "stats.h"

/* Logs the out-of-memory (or other) report for a failed allocation by
 * call (cudaMalloc, cuMemAlloc). */
void shim_report_alloc_failure(int dev, size_t size, int err, const char *call);

/* Records a block exported for IPC on the live page (stats_page_export):
 * 0, or -ENOENT if this process has no page. */
int shim_ipc_export(const void *handle, uint64_t offset, uint64_t size, int dev,
                    uint32_t *slot, uint64_t *nonce);

/* Fills *v with this process's current statistics. */
void shim_stats_view(stats_view *v);

#endif
