/* SPDX-License-Identifier: Apache-2.0 */
/*
 * interpose.h - what the runtime's and the driver's interposed entry points
 * share (interpose.c, interpose_driver.c).
 */
#ifndef CUPOOL_SHIM_INTERPOSE_H
#define CUPOOL_SHIM_INTERPOSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>


/* Serves size bytes from dev's pool for call (its name, for the report):
 * 0 and *a, -ENODEV if the device has no pool (pass the call on), or the
 * pool's error after the out-of-memory report. */
int shim_serve(int dev, size_t size, uintptr_t *a, const char *call);

/* shim_serve's result as the API's code, the same number in the runtime
 * and the driver: 0, out of memory (the device, the cap, a size too large)
 * or unknown. */
int shim_serve_error(int err);

/* Frees ptr in whichever pool owns it, dev's first (dev may be -1):
 * 0, -ENOENT if no pool owns it, or pool_free's error (logged). */
int shim_free_pooled(int dev, void *ptr);

/* Turns the driver's free and total memory of dev into what the process
 * may use: cached bytes are free to it; the cap bounds both. */
void shim_mem_info_adjust(int dev, size_t *free_b, size_t *total_b);



#endif
