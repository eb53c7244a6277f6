/* SPDX-License-Identifier: Apache-2.0 */
/*
 * scratch.h - where a test makes its files: under $TMPDIR (/tmp without
 * it), which scripts/run-tests points at a directory of each command's
 * own, so that a run leaves nothing in /tmp.
 */
#ifndef CUPOOL_TEST_SCRATCH_H
#define CUPOOL_TEST_SCRATCH_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* The tests' buffers hold a path of this many bytes before the names they
 * add (run-tests' are about 25). */
#define SCRATCH_DIR_MAX 48

/* "$TMPDIR/name" into buf (len bytes), for mkdtemp or mkstemp when name
 * ends in XXXXXX; returns buf. Fails the test if $TMPDIR is longer than
 * SCRATCH_DIR_MAX or the path does not fit. */
static inline char *scratch_path(char *buf, size_t len, const char *name)
{
    const char *t = getenv("TMPDIR");
    if (!t || !*t)
        t = "/tmp";
    if (strlen(t) > SCRATCH_DIR_MAX)
        fail_msg("TMPDIR=%s is longer than the tests' %d bytes", t, SCRATCH_DIR_MAX);
    int n = snprintf(buf, len, "%s/%s", t, name);
    if (n < 0 || (size_t)n >= len)
        fail_msg("%s/%s does not fit in %zu bytes", t, name, len);
    return buf;
}

#endif
