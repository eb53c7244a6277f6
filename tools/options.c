/* SPDX-License-Identifier: Apache-2.0 */
/*
 * options.c - cupool-options: the shim's option table, for
 * scripts/cupool (so that `cupool run` knows the options from the one
 * table libcupool.so reads, and checks them with its own parser).
 *
 *   cupool-options check      the environment's CUPOOL_* options as
 *                             libcupool.so will read them: 0 if every one
 *                             holds, 2 after one line per one that does not
 *                             (a bad value, or a name that is no option)
 *   cupool-options kind NAME  "flag" (NAME=1 turns it on) or "value";
 *                             exit 1 if NAME is no option
 *   cupool-options list       name, default and meaning, one per line
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

/* A line of the shim's parser, without what the shim would do instead
 * (its last "; using ...": a bad value quoted in the line may hold those
 * words itself): cupool run does not start the program. */
static void check_warn(const char *line)
{
    const char *cut = NULL;
    for (const char *at = line; (at = strstr(at, "; using")); at++)
        cut = at;
    fprintf(stderr, "cupool: run: %.*s\n",
            cut ? (int)(cut - line) : (int)strlen(line), line);
}

static const char *check_get(const char *name) { return getenv(name); }

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "check")) {
        shim_config c;
        int bad = shim_config_load(&c, check_get, check_warn);
        bad += shim_config_unknown(environ, check_warn);
        return bad ? 2 : 0;
    }
    if (argc == 3 && !strcmp(argv[1], "kind")) {
        int flag = shim_option_is_flag(argv[2]);
        if (flag < 0)
            return 1;
        return puts(flag ? "flag" : "value") < 0;
    }
    if (argc == 2 && !strcmp(argv[1], "list")) {
        shim_config_describe(STDOUT_FILENO);
        return 0;
    }
    fprintf(stderr, "usage: cupool-options check | kind NAME | list\n");
    return 2;
}
