/* SPDX-License-Identifier: Apache-2.0 */
/*
 * commands.h - cupool-stat's commands: each its usage (args.h) and what runs
 * it with the arguments after the command's name; each returns the exit
 * status (stat.c says what they mean).
 */
#ifndef CUPOOL_TOOLS_COMMANDS_H
#define CUPOOL_TOOLS_COMMANDS_H

#include "args.h"

extern const args_cmd stat_cmd, top_cmd, flush_cmd, dump_cmd, job_cmd;

int top_run(int argc, char **argv);
int flush_run(int argc, char **argv);
int dump_run(int argc, char **argv);
int job_run(int argc, char **argv);

#endif
