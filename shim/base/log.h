/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h - cupool's messages: every line starts with "cupool: " and goes to
 * stderr through one write(2), formatted in a stack buffer (no malloc, no
 * stdio), rate-limited. Never called from a signal handler.
 */
#ifndef CUPOOL_SHIM_LOG_H
#define CUPOOL_SHIM_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef enum shim_log_level {
    SHIM_LOG_OFF, SHIM_LOG_ERROR, SHIM_LOG_WARN, SHIM_LOG_INFO, SHIM_LOG_DEBUG
} shim_log_level;

void shim_log_set_level(shim_log_level level);

/* Logs one message (it may hold several lines; each gets the prefix) if
 * level is enabled and the rate limit allows. */
void shim_log(shim_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The same without the rate limit: for start-up lines (every bad option
 * is named, however many there are). */
void shim_log_always(shim_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));


#endif
