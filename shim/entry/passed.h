/* SPDX-License-Identifier: Apache-2.0 */
/*
 * passed.h - memory the process allocates through calls cupool passes on
 * to CUDA (stream-ordered, managed, pitched and 3D allocations, the
 * driver's cuMemCreate, allocations in a context no pool serves): counted
 * per device, live, against the device's cap and in the statistics.
 */
#ifndef CUPOOL_SHIM_PASSED_H
#define CUPOOL_SHIM_PASSED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a key names: a device address, or a cuMemCreate handle. */
enum shim_passed_kind { SHIM_PASSED_PTR = 1, SHIM_PASSED_HANDLE = 2 };

/* After the allocation shim_cap_take_passed (cap.h) took took bytes for (dev < 0: none
 * was taken, nothing to do): if it succeeded (ok, at key), records it with
 * its real size (a pitched one may be larger than asked); else gives the
 * bytes back. */
void shim_passed_settle(int dev, bool ok, int kind, uintptr_t key, size_t took, size_t size);

/* Records a successful allocation of size bytes, taken before. */
void shim_passed_record(int dev, int kind, uintptr_t key, size_t size);

/* Forgets an allocation freed: true (its bytes no longer count) if it was
 * recorded. */
bool shim_passed_release(int kind, uintptr_t key);

/* Forgets every allocation of dev (its context was destroyed). */
void shim_passed_forget_device(int dev);

#endif
