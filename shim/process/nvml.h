/* SPDX-License-Identifier: Apache-2.0 */
/*
 * nvml.h - how much device memory this process holds on a device, from
 * NVML, loaded with dlopen when first asked (optional: without it the
 * figure is STATS_UNKNOWN). Called from the helper thread only.
 */
#ifndef CUPOOL_SHIM_NVML_H
#define CUPOOL_SHIM_NVML_H

#include <stdint.h>

/* Bytes the driver counts for this process on CUDA device dev, or
 * STATS_UNKNOWN. */
uint64_t shim_nvml_process_memory(int dev);

#endif
