/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool.h - what test_pool.c and test_pool_segments.c share: each
 * test's fixture, set up fresh and closed after it (test_pool.c), and the
 * segments' tests that test_pool.c's main runs as a group of their own.
 */
#ifndef CUPOOL_TEST_TEST_POOL_H
#define CUPOOL_TEST_TEST_POOL_H

#include "pool_test.h"

int setup(void **state);
int teardown(void **state);
/* Fills the rest of the current small segment: no clean small block is left. */
void fill_small_tail(fixture *fx);

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

extern const struct CMUnitTest pool_segment_tests[];
extern const size_t pool_segment_count;

#endif
