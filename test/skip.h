/* SPDX-License-Identifier: Apache-2.0 */
/*
 * skip.h - a test skipped says why, in one line ("skip: REASON") that
 * scripts/run-tests gathers: make test ends by naming each reason once.
 */
#ifndef CUPOOL_TEST_SKIP_H
#define CUPOOL_TEST_SKIP_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

/* Skips the running test (cmocka's skip), saying why first. */
static inline void skip_because(const char *why)
{
    print_message("skip: %s\n", why);
    skip();
}

/* The reasons, one wording each. */
#define SKIP_SANITIZER_PYTHON "a sanitizer build cannot be preloaded into python3 or sh " \
                              "(the plain build's run covers it)"
#define SKIP_PLAIN_ONLY "nothing here depends on the build variant (the plain build's run " \
                        "covers it)"
#define SKIP_NOT_ROOT "needs root (another user, a tmpfs mount)"
#define SKIP_SANITIZER_MEMORY "a sanitizer's shadow of a move of many 256 MiB chunks took 4 GiB " \
                              "a process, and three such runs at once met the OOM killer (the " \
                              "plain build's run covers it)"

#endif
