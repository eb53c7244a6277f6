/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reader.h - what cupool-stat's commands share: the pages they read (this
 * user's, or the named processes'), why one could not be read, a group's
 * table, and the buffers a command formats into (one command runs per
 * process: they are not shared between threads).
 */
#ifndef CUPOOL_TOOLS_READER_H
#define CUPOOL_TOOLS_READER_H

#include <stdbool.h>
#include <stddef.h>

#include "stats.h"

enum { READER_MAX_PROCS = 256 };

/* The views read by reader_collect, and the order a command shows them in
 * (reader_collect fills it in reading order). */
extern stats_view reader_views[READER_MAX_PROCS];
extern const stats_view *reader_order[READER_MAX_PROCS];
/* One command's formatted output. */
extern char reader_buf[1 << 20];

/* What a page read's -errno means, for the user. */
const char *reader_error_text(int err);

/* Says so when pid is another user's process and the caller is not root
 * (of the initial user namespace): its page is in its user's own
 * directory, which no other user reads. True if said. */
bool reader_others_process(int pid);

/* Sleeps s seconds, through signals. */
void reader_sleep(double s);

/* Reads the pages of the given pids, or of every process of this user
 * (npids 0), into reader_views/reader_order, after waiting up to wait
 * seconds for their framework figures. Returns the number read, or -1
 * (a named process not read, said) or -2 (not a process id, said). */
int reader_collect(char **pids, int npids, double wait);

/* Group name's budget and each member's share, formatted into out (the
 * table, JSON or Prometheus). 0, or 1 with the reason said. */
int reader_group_text(const char *name, int json, int prom, char *out, size_t len);

#endif
