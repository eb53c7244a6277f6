/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handoff.h - file descriptors handed from one process to another of the
 * same user: how CUDA IPC of memory in VMM segments travels (ipc.c).
 *
 * The exporter listens on a Unix socket in the abstract namespace named
 * after its pid and a random token, which its handles carry: no other
 * user can take the name before it binds. Each side checks the other's
 * credentials as the kernel reports them (SO_PEERCRED): the exporter
 * answers only its own user; the importer believes only the process its
 * handle names, of its own user, so a socket anyone else bound under that
 * name is refused, never asked. A request names an export (slot and nonce, as cupool's handle
 * does); the answer is the export's layout, then its pieces, as
 * descriptors (SCM_RIGHTS) with their lengths, a batch at a time, each
 * sent once the importer says it took the one before: no more than a batch
 * is held or in flight (where descriptors count against the user's limit),
 * whatever the block's size.
 */
#ifndef CUPOOL_SHIM_HANDOFF_H
#define CUPOOL_SHIM_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

#include "vmm.h"

/* What an export is: n pieces of span bytes in all, the exported address
 * skip bytes into the first; and what the exporter keeps to find it again
 * (mine: never sent). */
typedef struct shim_handoff_layout {
    uint64_t n, skip, span;
    uint64_t mine[4];
} shim_handoff_layout;

/* The exporter's side, run on the handoff thread: the layout of export
 * (slot, nonce), or a negative errno sent back instead; then pieces k..
 * of it, at most max (fewer only at the end), as descriptors that are
 * closed once sent. */
typedef struct shim_handoff_source {
    int (*layout)(uint32_t slot, uint64_t nonce, shim_handoff_layout *l);
    int (*pieces)(const shim_handoff_layout *l, size_t k, shim_vmm_piece *p, size_t max,
                  size_t *got);
} shim_handoff_source;

/* Starts answering requests from src, once per process (a forked child
 * starts its own), and stores the socket's token for handles in *token.
 * Returns 0 or a negative errno (logged). */
int shim_handoff_serve(const shim_handoff_source *src, uint64_t *token);

/* The importer's side: the layout once (n at least 1, skip below span),
 * then each batch of pieces as it arrives (k, the first one's index),
 * whose descriptors are closed after. A negative errno ends the fetch. */
typedef struct shim_handoff_sink {
    int (*begin)(void *ctx, const shim_handoff_layout *l);
    int (*take)(void *ctx, size_t k, const shim_vmm_piece *p, size_t n);
    void *ctx;
} shim_handoff_sink;

/* Asks process pid, at its socket of token, for export (slot, nonce),
 * into sink: 0 once every piece
 * was taken; or a negative errno: the exporter's own answer, the sink's,
 * -ECONNREFUSED (no process there answers), -EPERM (what answered is not
 * that process of this user), -EPROTO or -ETIMEDOUT. */
int shim_handoff_fetch(int pid, uint64_t token, uint32_t slot, uint64_t nonce,
                       const shim_handoff_sink *sink);

#endif
