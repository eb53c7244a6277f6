/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_gz.h - loading a trace that may be gzip'd, for the trace tools
 * (with zlib; libcupool.so reads and writes plain traces only).
 */
#ifndef CUPOOL_TRACE_TRACE_GZ_H
#define CUPOOL_TRACE_TRACE_GZ_H

#include <stddef.h>

#include "trace.h"

/* Reads path ("-" = stdin), plain or gzip'd, into *t. Returns 0, or -1
 * with a one-line reason in why (cannot open, short or bad header, bad
 * gzip data, out of memory). A gzip'd file may decompress to at most
 * 64 MiB plus 200 times its size. */
int trace_load_any(const char *path, trace *t, char *why, size_t len);

#endif
