/* SPDX-License-Identifier: Apache-2.0 */
/*
 * move.h - cupool's own move of a process's memory (move.c), asked
 * through its page: out to host memory before the driver's checkpoint,
 * back after its restore.
 */
#ifndef CUPOOL_PAUSE_MOVE_H
#define CUPOOL_PAUSE_MOVE_H

#include "stats.h"

/* Out to host memory: 0 (*v its view after), or 1 with why said (the
 * driver moves everything). */
int pause_move_out(int pid, double timeout, stats_view *v);
/* Back: 0, or 1 with why said (it stays paused). */
int pause_move_back(int pid, double timeout);

#endif
