/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ipc_vmm.h - CUDA IPC of blocks in VMM segments (CUPOOL_VMM,
 * CUPOOL_STITCH), which have no CUDA handle: the handle is always
 * cupool's, and the importer maps the block's physical pieces, which the
 * exporter hands over as file descriptors (handoff.h). ipc.c sends such
 * blocks and handles here.
 */
#ifndef CUPOOL_SHIM_IPC_VMM_H
#define CUPOOL_SHIM_IPC_VMM_H

#include <stdbool.h>
#include <stdint.h>

/* Fills the 64-byte handle h for the block holding ptr on device dev,
 * whose segments are VMM ones, and starts answering importers: 0 or
 * cudaErrorInvalidValue (logged). */
int shim_ipc_vmm_get(int dev, uintptr_t ptr, void *h);

/* Whether h is such a handle. */
bool shim_ipc_vmm_handle(const void *h);

/* Opens h, from another process: ready() makes a context current as the
 * API's own open would, and the block is mapped for its device (once per
 * handle; later opens count a user). cudaSuccess with the block's address
 * in *ptr, or cudaErrorInvalidValue, cudaErrorMemoryAllocation or
 * cudaErrorDeviceUninitialized (in the exporting process, as CUDA), with
 * one line: never an address that is not the block. */
int shim_ipc_vmm_open(const void *h, void (*ready)(void), void **ptr);

/* Closes what shim_ipc_vmm_open gave (the last user's close waits for the
 * work of the context it was opened in, then unmaps): true, with *err 0;
 * false if ptr is not such an address. */
bool shim_ipc_vmm_close(void *ptr, int *err);

#endif
