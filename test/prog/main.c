/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - rt_prog NAME: finds scenario NAME in the features' tables (one
 * per test/prog/<feature>.c) and runs it.
 */
#include "prog.h"

#define PROG_FEATURES(X)                                                      \
    X(fence) X(capture) X(memory) X(group) X(stats) X(job) X(signals)         \
    X(trace) X(bench) X(ipc) X(vmm) X(cupti)

#define X_DECLARE(f) extern const prog_scenario prog_##f##_scenarios[];
PROG_FEATURES(X_DECLARE)
#undef X_DECLARE

static const prog_scenario *const features[] = {
#define X_ENTRY(f) prog_##f##_scenarios,
    PROG_FEATURES(X_ENTRY)
#undef X_ENTRY
};

int main(int argc, char **argv)
{
    prog_argc = argc;
    prog_argv = argv;
    /* RT_SETENV=NAME=VALUE: set once cupool has loaded, before the first
     * CUDA call, as a Python program sets os.environ. */
    static char set[256];
    const char *sv = getenv("RT_SETENV");
    if (sv && strlen(sv) < sizeof(set) && strchr(sv, '='))
        putenv(strcpy(set, sv));
    for (size_t f = 0; argc > 1 && f < sizeof(features) / sizeof(features[0]); f++)
        for (const prog_scenario *s = features[f]; s->name; s++)
            if (!strcmp(argv[1], s->name))
                return s->run();
    fprintf(stderr, "usage: rt_prog SCENARIO\n");
    return 2;
}
