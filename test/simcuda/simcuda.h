/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simcuda.h - the simulated CUDA runtime's own interface, for tests.
 *
 * build/sim/libcudart.so.13 carries the real library's soname and version
 * node and implements the runtime calls cupool uses, backed by host memory
 * (mmap, so untouched bytes cost nothing). SIMCUDA_DEVICES (default 2) and
 * SIMCUDA_CAPACITY (bytes per device, default 16 GiB) shape it;
 * SIMCUDA_NO_VMM=1 makes the driver's virtual memory calls unsupported;
 * SIMCUDA_RECORD_US=N makes each event record take N microseconds.
 */
#ifndef CUPOOL_SIMCUDA_H
#define CUPOOL_SIMCUDA_H

#include <stdint.h>

#include <cuda_runtime_api.h>

typedef struct simcuda_stats {
    unsigned long mallocs, frees, bad_frees, syncs;
    unsigned long event_records, legacy_records, stream_waits, event_queries;
    unsigned long capture_queries;  /* cudaStreamIsCapturing calls */
    /* The driver's virtual memory calls (reached through
     * cudaGetDriverEntryPointByVersion): granules created and mapped,
     * unmapped, and unmapped while work recorded since the last device
     * synchronization may still run (event records and stream waits count
     * as work). */
    unsigned long vmm_maps, vmm_unmaps, unsynced_unmaps;
    unsigned long long vmm_mapped;  /* bytes mapped now */
    unsigned long long used, capacity;
} simcuda_stats;

void simcuda_get_stats(int dev, simcuda_stats *out);
/* Marks a stream (cudaStreamLegacy included) as capturing a graph, or not,
 * behind the interposed runtime's back (as the driver API would). The
 * runtime's own cudaStreamBeginCapture / EndCapture do the same. */
void simcuda_set_capturing(cudaStream_t s, int on);
/* Marks a stream as running long work, or not: an event recorded on it
 * meanwhile is not ready (cudaEventQuery: cudaErrorNotReady) until the work
 * ends or the device is synchronized. */
void simcuda_set_busy(cudaStream_t s, int on);
/* The devices (a bit each) granted access to the VMM mapping at addr
 * (cuMemSetAccess), or 0 if none is mapped there. */
unsigned simcuda_vmm_access(uintptr_t addr);
/* The order of work: the number of the legacy stream's latest event
 * record that the last work queued on s follows (through stream waits;
 * 0: none), and in *legacy the number of the latest record there is. */
unsigned long simcuda_work_order(cudaStream_t s, unsigned long *legacy);
/* Reports a driver call (its CUPTI id), without parameters, to CUPTI's
 * subscriber: what a call the shim cannot read looks like. */
void simcuda_report_call(unsigned cbid);

#endif
