/* SPDX-License-Identifier: Apache-2.0 */
/*
 * planted_cmocka.c - a cmocka program whose every outcome is known, for
 * test/test_run_tests.sh to check scripts/run-tests' counting against.
 *
 *   planted_cmocka mixed  a pass, a fail, a skip, a pass whose teardown
 *                         fails (cmocka: an error): exits 2
 *   planted_cmocka crash  a pass, then a test that kills its process
 *                         (SIGKILL: no handler, no summary), then a pass
 *   planted_cmocka hang   a pass, then a test that never returns (the
 *                         command's timeout ends it)
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

static void passes(void **s) { (void)s; }
static void fails(void **s) { (void)s; assert_int_equal(1, 2); }
static void skips(void **s) { (void)s; skip(); }
static void dies(void **s) { (void)s; raise(SIGKILL); }
static void hangs(void **s)
{
    (void)s;
    for (;;)
        pause();
}
static int teardown_fails(void **s) { (void)s; return -1; }

int main(int argc, char **argv)
{
    const struct CMUnitTest mixed[] = {
        cmocka_unit_test(passes),
        cmocka_unit_test(fails),
        cmocka_unit_test(skips),
        cmocka_unit_test_teardown(passes, teardown_fails),
    };
    const struct CMUnitTest crash[] = {
        cmocka_unit_test(passes), cmocka_unit_test(dies), cmocka_unit_test(passes),
    };
    const struct CMUnitTest hang[] = {cmocka_unit_test(passes), cmocka_unit_test(hangs)};
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "mixed"))
        return cmocka_run_group_tests_name("mixed", mixed, NULL, NULL);
    if (!strcmp(mode, "crash"))
        return cmocka_run_group_tests_name("crash", crash, NULL, NULL);
    if (!strcmp(mode, "hang"))
        return cmocka_run_group_tests_name("hang", hang, NULL, NULL);
    return 2;
}
