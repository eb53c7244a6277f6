/* SPDX-License-Identifier: Apache-2.0 */
/*
 * plot.h - the memory timeline of a replayed trace as a self-contained SVG:
 * allocated, reserved and largest free block over time, the reserved
 * memory the recording process saw (when the trace has it), and the
 * out-of-memory and flush events marked.
 */
#ifndef CUPOOL_STATS_PLOT_H
#define CUPOOL_STATS_PLOT_H

#include <stdio.h>

#include "replay.h"

/* Writes the SVG for r (a replay of t with samples kept, under opts) to
 * out, against time, or against the event number when by_event is set or
 * the trace has no times (long idle stretches then take no room). Returns
 * 0, or -1 on a write error. */
int plot_svg(FILE *out, const trace *t, const replay_opts *opts,
             const replay_result *r, const char *title, bool by_event);

#endif
