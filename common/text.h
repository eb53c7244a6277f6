/* SPDX-License-Identifier: Apache-2.0 */
/*
 * text.h - text built into a caller's buffer: formatted pieces appended
 * one after another, cut (never overrun) at the buffer's end, with the
 * length the whole text would have counted on, so a caller can tell it
 * was cut. No allocation: the statistics' formats run on the helper
 * thread of the program and in the tools alike.
 */
#ifndef CUPOOL_COMMON_TEXT_H
#define CUPOOL_COMMON_TEXT_H

#include <stddef.h>

/* buf of len bytes (len may be 0, buf then NULL); n counts every byte
 * appended, kept or cut. Start one as (text_buf){buf, len, 0}. */
typedef struct text_buf {
    char *buf;
    size_t len, n;
} text_buf;

/* Appends printf(fmt, ...). */
void text_put(text_buf *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends s as it is (no format to parse). */
void text_str(text_buf *t, const char *s);

/* Ends the text with a NUL (the last byte kept when cut) and returns the
 * length the whole text has: len or more when it was cut. */
size_t text_done(text_buf *t);

/* s for a terminal or a log: every byte that is not printable ASCII
 * (escape sequences, newlines, other encodings) becomes '?', truncated to
 * len - 1 bytes. Names (a process's, a path) are their owner's to choose,
 * not ours. Returns buf. */
const char *text_printable(const char *s, char *buf, size_t len);

#endif
