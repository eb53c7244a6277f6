/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ipc.h - CUDA IPC of pooled blocks (ipc.c): the exporter's handles and the
 * importer's mappings, behind cudaIpcGetMemHandle, cudaIpcOpenMemHandle and
 * cudaIpcCloseMemHandle and their driver forms.
 */
#ifndef CUPOOL_SHIM_IPC_H
#define CUPOOL_SHIM_IPC_H

#include <cuda_runtime_api.h>

/* The real IPC calls of the runtime or of the driver; each returns its
 * API's code. Handles are CUDA's 64 bytes either way. */
typedef struct shim_ipc_api {
    int (*get)(void *h, void *ptr);
    int (*open)(void **ptr, const void *h, unsigned int flags);
    int (*close)(void *ptr);
    void (*ready)(void); /* a context current, as the API's open would make it */
} shim_ipc_api;
extern const shim_ipc_api shim_ipc_runtime, shim_ipc_driver;

/* Each returns 0 or the API's code (cupool's own refusals are 1, invalid
 * value, and 2, out of memory, in both). */

/* The handle of the block at ptr: CUDA's for a block that starts its
 * segment (and for memory no pool owns), cupool's for any other. */
int shim_ipc_get(const shim_ipc_api *api, void *h, void *ptr);

/* Opens a handle from cudaIpcGetMemHandle in another process: a cupool
 * handle maps the exporter's segment (once per segment) and gives the
 * block's address in it; CUDA's handle is CUDA's to open. A cupool handle
 * that cannot be read here is cudaErrorInvalidValue, with one line: never
 * an address that is not the block. */
int shim_ipc_open(const shim_ipc_api *api, void **ptr, const void *h, unsigned int flags);

/* Closes what shim_ipc_open gave; the segment is unmapped with its last
 * user. Any other pointer is CUDA's to close. */
int shim_ipc_close(const shim_ipc_api *api, void *ptr);

#endif
