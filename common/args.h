/* SPDX-License-Identifier: Apache-2.0 */
/*
 * args.h - the command line, read and refused the one way every program
 * behind `cupool` does it: a mistake is one line on stderr naming it, with
 * the command's help to turn to, and exit status 2; an unknown option is
 * named on the first line and the command's usage follows; whatever the
 * user typed is shown with its control bytes as '?'.
 */
#ifndef CUPOOL_COMMON_ARGS_H
#define CUPOOL_COMMON_ARGS_H

#include <stdbool.h>

/* A command of a program: "cupool" "stat" and its usage text; cmd NULL
 * for the program as a whole. */
typedef struct args_cmd {
    const char *prog, *cmd, *help;
} args_cmd;

/* arg as a message may show it: control bytes as '?', cut to 120 bytes. The
 * result lives until the fourth call after this one. */
const char *args_shown(const char *arg);

/* "PROG CMD: <fmt> (see 'PROG CMD --help')" on stderr (without CMD when it
 * is NULL). Returns 2. */
int args_mistake(const args_cmd *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An argument that is neither an option c takes nor in its place: an
 * unknown option (it starts with '-') is named, then c's usage follows;
 * anything else is an unexpected argument. Returns 2. */
int args_unexpected(const args_cmd *c, const char *arg);

/* Whether argv[0..argc) holds -h or --help. */
bool args_wants_help(int argc, char **argv);

/* s as seconds, a finite number from lo to hi, into *out. 0, or -EINVAL. */
int args_seconds(const char *s, double lo, double hi, double *out);

/* s as a process id (1 to 4194304, the kernel's PID_MAX_LIMIT), or -1. */
int args_pid(const char *s);

#endif
