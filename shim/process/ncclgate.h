/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclgate.h - the helper thread's side of a controller's requests to the
 * NCCL gate (stats.h's STATS_REQ_NCCL, gate.h): close it toward targets,
 * suspend every communicator once no thread is past it (the devices'
 * work waited for first, so that nothing is outstanding), resume them,
 * open it. Each answer's outcome is published on the page (stats_gate):
 * its error and, in words, why.
 */
#ifndef CUPOOL_SHIM_NCCLGATE_H
#define CUPOOL_SHIM_NCCLGATE_H

#include "stats.h"

/* Does what a asks. Helper thread, outside the page's lock. */
void shim_ncclgate_serve(const stats_nccl_ask *a);

/* The gate and the last request's outcome, into g. */
void shim_ncclgate_view(stats_gate *g);

#endif
