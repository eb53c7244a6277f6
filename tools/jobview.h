/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jobview.h - one process's NCCL job as this node shows it (cupool job):
 * each communicator its page lists, the other processes on the node whose
 * pages list the same id (the same communicator: stats_comm), and how many
 * of its ranks no page read here holds (on other nodes, or in processes
 * this reader may not read).
 */
#ifndef CUPOOL_STATS_JOBVIEW_H
#define CUPOOL_STATS_JOBVIEW_H

#include <stdbool.h>
#include <stddef.h>

#include "node.h"
#include "stats.h"

/* Writes v's job, matched against every process of s (v's own entry in s,
 * if there, is left out), as text or as one JSON object, into buf
 * (NUL-terminated, truncated at len). Returns the length it needed, as
 * snprintf does. */
size_t jobview_format(const stats_view *v, const node_scan *s, bool json, char *buf,
                      size_t len);

#endif
