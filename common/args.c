/* SPDX-License-Identifier: Apache-2.0 */
/*
 * args.c - see args.h.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "text.h"

const char *args_shown(const char *arg)
{
    static char b[4][128];
    static unsigned next;
    char *out = b[next++ % 4];
    return text_printable(arg, out, sizeof(b[0]));
}

int args_mistake(const args_cmd *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const char *sp = c->cmd ? " " : "", *cmd = c->cmd ? c->cmd : "";
    fprintf(stderr, "%s%s%s: ", c->prog, sp, cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see '%s%s%s --help')\n", c->prog, sp, cmd);
    va_end(ap);
    return 2;
}

int args_unexpected(const args_cmd *c, const char *arg)
{
    if (arg[0] != '-' || !arg[1])
        return args_mistake(c, "unexpected argument '%s'", args_shown(arg));
    fprintf(stderr, "%s %s: unknown option '%s'\n%s", c->prog, c->cmd, args_shown(arg),
            c->help);
    return 2;
}

bool args_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return true;
    return false;
}

int args_seconds(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !isfinite(v) || v < lo || v > hi)
        return -EINVAL;
    *out = v;
    return 0;
}

int args_pid(const char *s)
{
    char *end;
    long pid = strtol(s, &end, 10);
    return *s && !*end && pid > 0 && pid <= 4194304 ? (int)pid : -1;
}
