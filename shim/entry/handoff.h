/*
 * handoff.h - file descriptors handed from one process to another of the
 * same user: how CUDA IPC of memory in VMM segments travels (ipc.c).
 *
 * The exporter listens on a Unix socket in the abstract namespace named
 * after its pid. Each side checks the other's credentials as the kernel
 * reports them (SO_PEERCRED): the exporter answers only its own user; the
 * importer believes only the process its handle names, of its own user,
 * so a socket another user bound first under that name is refused, never
 * asked. A request names an export (slot and nonce, as cupool's handle
 * does); the answer is the export's pieces, as descriptors (SCM_RIGHTS)
 * with their lengths.
 */
#ifndef CUPOOL_SHIM_HANDOFF_H
#define CUPOOL_SHIM_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "vmm.h"

/* The exporter's answer to a request for (slot, nonce): 0 with *pieces
 * (malloc'd; the descriptors are closed and the array freed once sent)
 * and *n, and *skip, the block's offset in the first piece; or a negative
 * errno sent back instead. Runs on the handoff thread. */
typedef int (*shim_handoff_fn)(uint32_t slot, uint64_t nonce, shim_vmm_piece **pieces,
                               size_t *n, uint64_t *skip);

/* Starts answering requests with fn, once per process (a forked child
 * starts its own). Returns 0 or a negative errno (logged). */
int shim_handoff_serve(shim_handoff_fn fn);

/* Asks process pid for export (slot, nonce): 0 with *pieces (malloc'd;
 * the caller closes the descriptors and frees it), *n and *skip; or a
 * negative errno: the exporter's own answer, -ECONNREFUSED (no process
 * there answers), -EPERM (what answered is not that process of this user),
 * -EPROTO or -ETIMEDOUT. */
int shim_handoff_fetch(int pid, uint32_t slot, uint64_t nonce, shim_vmm_piece **pieces,
                       size_t *n, uint64_t *skip);

#endif
