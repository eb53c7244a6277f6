/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_safefile.c - the files cupool writes (common/safefile.c) against a
 * name that another user swaps while they are opened.
 *
 * The attack: where fs.protected_hardlinks is off, another user who may
 * remove names in the directory of CUPOOL_TRACE or CUPOOL_STATS_FILE
 * links that name to one of the victim's files and removes the link, in a
 * loop; the victim's own process writes. Here the linker is a child of the
 * same user (which fs.protected_hardlinks=1 allows too): the writer's
 * checks see the same names either way, and owner checks cannot tell.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "safefile.h"

enum { OPENS = 2000 };

static char dir[64], victim[128], watched[128];
static _Atomic long *links; /* links the linker made, shared with it */
static const char precious[] = "precious\n";

static int race_setup(void **s)
{
    (void)s;
    links = mmap(NULL, sizeof(*links), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
    if (links == MAP_FAILED)
        return -1;
    *links = 0;
    const char *tmp = getenv("TMPDIR"); /* the run's own (scripts/run-tests) */
    if (!tmp || !*tmp || strlen(tmp) + sizeof("/cupool-safefile-XXXXXX") > sizeof(dir))
        tmp = "/tmp";
    snprintf(dir, sizeof(dir), "%s/cupool-safefile-XXXXXX", tmp);
    if (!mkdtemp(dir))
        return -1;
    snprintf(victim, sizeof(victim), "%s/precious", dir);
    snprintf(watched, sizeof(watched), "%s/watched", dir);
    FILE *f = fopen(victim, "w");
    if (!f)
        return -1;
    fputs(precious, f);
    return fclose(f);
}

static int race_teardown(void **s)
{
    (void)s;
    munmap((void *)links, sizeof(*links));
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

/* Starts the linker: links watched to the victim and removes it, in a
 * loop, until killed; with yield, it lets the name be absent a while after
 * each removal (the old trace's open needed that to get through; the old
 * append did not). Returns once it has linked once. */
static pid_t linker_start(bool yield)
{
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t c = fork();
    assert_true(c >= 0);
    if (c == 0) {
        close(ready[0]);
        for (long i = 0;; i++) {
            if (link(victim, watched) == 0 && atomic_fetch_add(links, 1) == 0)
                (void)!write(ready[1], "x", 1);
            unlink(watched);
            if (yield)
                sched_yield();
        }
    }
    close(ready[1]);
    char b;
    assert_int_equal(read(ready[0], &b, 1), 1);
    close(ready[0]);
    return c;
}

static void linker_stop(pid_t c)
{
    kill(c, SIGKILL);
    assert_int_equal(waitpid(c, NULL, 0), c);
}

/* The victim's bytes are what they were. */
static void victim_intact(const char *what, int opened, int refused)
{
    char got[64] = {0};
    int fd = open(victim, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, got, sizeof(got) - 1);
    close(fd);
    struct stat st;
    assert_int_equal(stat(victim, &st), 0);
    long made = atomic_load(links);
    print_message("%s: %d opens written to, %d refused; the linker linked %ld times\n",
                  what, opened, refused, made);
    if (n != (ssize_t)strlen(precious) || strcmp(got, precious))
        fail_msg("%s wrote the victim's file: it holds %zd bytes '%.20s'", what, n, got);
    /* The race was run: the writer wrote, the linker linked throughout. */
    assert_true(opened > 0);
    assert_true(made >= 10);
}

/* CUPOOL_STATS_FILE's append, 3 x 2 000 times against the linker (the
 * old open for appending wrote the victim in about half the runs of 2 000,
 * three catch it nearly always): no byte reaches the victim. */
static void test_append_never_reaches_a_swapped_name(void **s)
{
    (void)s;
    pid_t c = linker_start(false);
    int opened = 0, refused = 0;
    for (int i = 0; i < 3 * OPENS; i++) {
        const char *why = NULL;
        if (safefile_append(watched, "appended\n", 9, &why)) {
            refused++;
            continue;
        }
        opened++;
    }
    linker_stop(c);
    victim_intact("append", opened, refused);
}

/* CUPOOL_TRACE's open (a new file that takes the name), 2 000 times
 * against the linker: the victim is never emptied nor written. */
static void test_replace_never_truncates_a_swapped_name(void **s)
{
    (void)s;
    pid_t c = linker_start(true);
    int opened = 0, refused = 0;
    for (int i = 0; i < OPENS; i++) {
        const char *why = NULL;
        int fd = safefile_replace(watched, &why);
        if (fd < 0) {
            refused++;
            continue;
        }
        opened++;
        (void)!write(fd, "trace\n", 6);
        close(fd);
    }
    linker_stop(c);
    victim_intact("replace", opened, refused);
}

/* What the replace leaves: the name holds the new file alone, with what
 * was written; an older file of the user's at the name is not written
 * (another name of it keeps its bytes); no temporary name is left. */
static void test_replace_takes_the_name(void **s)
{
    (void)s;
    char other[160];
    snprintf(other, sizeof(other), "%s/old", dir);
    FILE *f = fopen(watched, "w");
    assert_non_null(f);
    fputs("old\n", f);
    fclose(f);
    assert_int_equal(link(watched, other), 0);
    const char *why = NULL;
    assert_int_equal(safefile_replace(watched, &why), -1); /* two names: refused */
    assert_non_null(strstr(why, "hard links"));
    assert_int_equal(unlink(other), 0);
    int fd = safefile_replace(watched, &why);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "new\n", 4), 4);
    assert_int_equal(safefile_replace(watched, &why), -1); /* held: refused */
    assert_non_null(strstr(why, "locked"));
    close(fd);
    char got[16] = {0};
    fd = open(watched, O_RDONLY);
    assert_int_equal(read(fd, got, sizeof(got)), 4);
    close(fd);
    assert_string_equal(got, "new\n");
    char cmd[192];
    snprintf(cmd, sizeof(cmd), "test $(ls -A %s | wc -l) -eq 2", dir); /* precious, watched */
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_append_never_reaches_a_swapped_name, race_setup,
                                        race_teardown),
        cmocka_unit_test_setup_teardown(test_replace_never_truncates_a_swapped_name,
                                        race_setup, race_teardown),
        cmocka_unit_test_setup_teardown(test_replace_takes_the_name, race_setup,
                                        race_teardown),
    };
    return cmocka_run_group_tests_name("safefile", tests, NULL, NULL);
}
