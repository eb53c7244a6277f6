/* SPDX-License-Identifier: Apache-2.0 */
/*
 * say.h - how cupool-pause tells what it did and why it did not: one line
 * on stderr, "cupool: " first, printable whatever it carries (a rank's
 * gate reason is its user's words).
 */
#ifndef CUPOOL_PAUSE_SAY_H
#define CUPOOL_PAUSE_SAY_H

void pause_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
