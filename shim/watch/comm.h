/* SPDX-License-Identifier: Apache-2.0 */
/*
 * comm.h - which non-blocking streams a poll fence may leave out
 * (CUPOOL_FENCE=poll with CUPOOL_CUPTI=1): those with no work queued since
 * a fence covered them (PyTorch's stream pool makes over a hundred, most
 * idle), and the streams of collectives.
 *
 * A fence must wait for every stream whose queued work may touch a freed
 * block. A data-parallel job's communication stream runs all-reduces for
 * most of a step, so a fence that waits for it either stalls the compute
 * stream behind the all-reduce in flight (the overlap the job is built on
 * is lost) or leaves the freed blocks unused (memory grows). Yet NCCL's
 * kernels touch only the buffers its calls name and NCCL's own memory.
 *
 * So cupool interposes NCCL's collective calls and notes the buffers each
 * names. Through CUPTI it sees every driver call that queues work, with its
 * stream: work queued while the calling thread is inside such a call is
 * the collective's, and its stream becomes a comm stream holding the
 * call's buffers; any other work on a stream (a kernel, a copy) marks it.
 * A fence then leaves a stream out unless it is marked: by other work, or
 * by a free of memory that overlaps one of its buffers. Everything unknown
 * marks: a stream first seen with work (its past is unknown), work whose
 * stream cannot be read (all streams), frees while any thread is inside
 * NCCL or of memory allocated while one was (NCCL's own; all streams), and
 * CUPTI's start (what came before it went unseen).
 *
 * Why leaving a stream out is sound: a fence that includes stream S
 * records an event on S that covers all S's work queued before it, and
 * fences retire in order, so once a later fence is done, so is that work.
 * A stream needs to be in a fence only for work queued since the last fence
 * that included it, and marks say exactly when such work may touch a block
 * freed since.
 */
#ifndef CUPOOL_SHIM_COMM_H
#define CUPOOL_SHIM_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The NCCL calls libcupool.so defines (comm.c): the collectives and
 * groups, whose buffers it notes, and the calls that set up or tear down
 * a communicator, counted only as being inside NCCL. */
#define SHIM_NCCL_EXPORTS(X)                                                  \
    X(ncclAllReduce) X(ncclBroadcast) X(ncclBcast) X(ncclReduce)              \
    X(ncclAllGather) X(ncclReduceScatter) X(ncclAlltoAll) X(ncclGather)       \
    X(ncclScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)  \
    X(ncclCommInitRank) X(ncclCommInitRankConfig) X(ncclCommInitRankScalable) \
    X(ncclCommInitAll) X(ncclCommSplit) X(ncclCommShrink) X(ncclCommGrow)     \
    X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort)

/* Whom each NCCL call tells, as it begins (cupti.h's shim_work_nccl_call:
 * CUPTI's start under CUPOOL_CUPTI=auto depends on it), set once at
 * start-up, before any NCCL call: comm.c does not call CUPTI's module,
 * which calls it. */
void shim_comm_on_first_call(void (*start)(void));

/* CUPTI reports every driver call that may queue work from now on (only
 * then are collectives' buffers noted). */
void shim_comm_watching(void);

/* CUPTI reports nothing from now on (the program took it): every stream
 * is in every fence again. */
void shim_comm_unwatching(void);

/* A driver call, as CUPTI reports it (cbid, its parameters; NULL if
 * unknown): at its entry a stream owing its order pays (below), before the
 * call queues work on it; at its return the work is attributed to a
 * stream. */
void shim_comm_call(unsigned cbid, const void *params, bool entry);

/* A fence's questions and answers about its streams, under one lock:
 * shim_comm_begin takes it and returns true, unless CUPTI does not watch
 * (every stream must then be in the fence: nothing to ask, nothing
 * taken); shim_comm_end lets it go. No CUDA call in between: CUPTI's
 * callback takes the same lock. */
bool shim_comm_begin(void);
void shim_comm_end(void);

/* Between the two: the streams of device dev a fence begun now must
 * record an event on (those marked since a fence covered them), copied
 * into *out (grown as needed, *cap its room); how many, or SIZE_MAX when
 * every stream of dev must be in it (a list could not grow). A stream
 * shim_comm_track did not note is never among them: the fence includes it
 * always. */
typedef struct shim_comm_mark {
    uint64_t marks, seq;
} shim_comm_mark;
typedef struct shim_comm_due_stream {
    void *stream;
    void *entry;            /* comm.c's, for shim_comm_covered */
    shim_comm_mark mark;
} shim_comm_due_stream;
size_t shim_comm_due(int dev, shim_comm_due_stream **out, size_t *cap);

/* Between the two: a fence recorded an event on a stream shim_comm_due
 * gave: its marks and buffers up to then are covered. The fence holds its
 * device's lock from one to the other, so that the stream cannot be
 * forgotten between them (shim_comm_forget is called under it). */
void shim_comm_covered(const shim_comm_due_stream *due);

/* A pooled block [addr, addr + size) was allocated / freed. */
void shim_comm_allocated(uintptr_t addr);
void shim_comm_freed(uintptr_t addr, size_t size);

/* Whether any stream is a comm stream now. */
bool shim_comm_active(void);

/* A non-blocking stream device dev tracks, just made: a fence may leave
 * it out while no work was queued on it since a fence covered it, and
 * order it lazily (below). False if it could not be noted (host memory):
 * every fence then includes and orders it. */
bool shim_comm_track(void *s, int dev);

/* Ordering streams lazily. A poll fence whose legacy event is still
 * running when its other events are done is finished by making the
 * non-blocking streams wait for that event: a block it frees may be handed
 * to work on any of them. PyTorch's stream pool holds over a hundred such
 * streams, nearly all idle, and a data-parallel job finishes fences that
 * way about 150 times a step. While CUPTI watches, a stream is instead
 * noted as owing the wait, and pays it when CUPTI reports a call that
 * queues work on it, at that call's entry, before the work is queued:
 * work that can touch the block comes after it is handed out, so after
 * the note. A call whose stream cannot be read makes every stream pay.
 * When CUPTI stops watching (the program took it), every stream owing
 * pays at once, before CUPTI is let go.
 *
 * shim_comm_on_pay, at start-up: pay(dev, s) makes stream s wait for the
 * event device dev's streams owe (the latest such), without blocking on
 * any lock a thread queuing work may hold; it returns false if s cannot
 * wait now (it is capturing a graph), and s keeps owing.
 * shim_comm_owe: every stream of dev noted here now owes; false (nothing
 * owed) if CUPTI does not watch, and the caller orders them itself (and
 * always those shim_comm_track could not note). */
void shim_comm_on_pay(bool (*pay)(int dev, void *s));
bool shim_comm_owe(int dev);

/* Stream s is being destroyed: it is known no more. */
void shim_comm_forget(void *s);

#endif
