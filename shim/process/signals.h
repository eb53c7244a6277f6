/* SPDX-License-Identifier: Apache-2.0 */
/*
 * signals.h - cupool keeps its own signals (CUPOOL_FLUSH_SIGNAL,
 * CUPOOL_STATS_SIGNAL) whatever the program does with them later, and
 * chains the program's handlers behind its own, as a JVM's signal-chaining
 * library does.
 *
 * libcupool.so exports the C library's calls that set a disposition
 * (SHIM_SIGNAL_EXPORTS). For a signal cupool owns they
 * record what the program asked for and answer queries with it; the kernel
 * keeps cupool's handler, installed with the program's mask and flags
 * (SA_RESTART, SA_ONSTACK, SA_NODEFER), so that a system call the program
 * expects to end with EINTR still does. SA_RESETHAND is emulated: the
 * program's record goes back to SIG_DFL on the first delivery. SIG_DFL and
 * SIG_IGN both mean "the program has no handler": the signal then only
 * does cupool's work, and never ends the process. Every other signal
 * passes straight to the C library.
 *
 * cupool's handler writes one byte to the notify descriptor (the helper
 * thread's pipe; none after fork), then calls the program's handler, if
 * any, with its own calling convention (SA_SIGINFO or not).
 */
#ifndef CUPOOL_SHIM_SIGNALS_H
#define CUPOOL_SHIM_SIGNALS_H

#include <signal.h>
#include <stdbool.h>

enum { SHIM_SIGNALS_MAX = 2 };

/* The C library's calls libcupool.so exports to keep its signals. */
#define SHIM_SIGNAL_EXPORTS(X)                                                \
    X(sigaction) X(__sigaction) X(signal) X(bsd_signal) X(ssignal)            \
    X(sysv_signal) X(__sysv_signal) X(sigset) X(siginterrupt)

/* Takes the given signals (0 entries skipped): records each one's current
 * disposition as the program's and installs cupool's handler. Bytes go to
 * notify_fd (non-blocking). Returns the number of signals taken; logs
 * each one that could not be. Call once, from the constructor. */
int shim_signals_take(const int *sigs, int n, int notify_fd);

/* Stops writing bytes (a forked child; the shim off). Handlers the program
 * installed keep being called. Async-signal-safe. */
void shim_signals_mute(void);

/* True if sig is one cupool took. */
bool shim_signals_owns(int sig);

/* Blocks every signal in the calling thread but the ones cupool took, so
 * that they reach it even when every program thread blocks them. */
void shim_signals_helper_mask(void);

#endif
