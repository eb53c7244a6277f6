/* SPDX-License-Identifier: Apache-2.0 */
/*
 * callkind.h - which driver calls queue work on a stream, and which one,
 * from the parameters CUPTI's callback reports (comm.h uses it to attribute
 * work to streams and to make a stream owing its order pay first).
 */
#ifndef CUPOOL_SHIM_CALLKIND_H
#define CUPOOL_SHIM_CALLKIND_H

/* How a driver call's stream is read from its parameters. */
enum call_kind {
    CALL_NO_WORK, /* it queues no work on a non-default stream (it allocates,
                     loads, creates, synchronizes, or copies synchronously on
                     a default stream) */
    CALL_STREAM,  /* it queues work on the stream it names (*s) */
    CALL_UNKNOWN  /* anything else, or no parameters: any stream */
};

/* The kind of driver call cbid (CUPTI's id) with parameters p (NULL if
 * unknown), and its stream into *s for CALL_STREAM. */
enum call_kind shim_call_kind(unsigned cbid, const void *p, void **s);

#endif
