/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-turn.c - CUPOOL_GROUP: waiting for a turn (first come, first served, a
 * deadlock refused, a killed waiter).
 */
#include "harness.h"

/* ---- CUPOOL_GROUP: waiting for a turn ---------------------------------------- */

static char turn_dir[160];

/* rt_prog turn as member ME of group NAME (a budget of 100 MiB on a
 * simulated device of 200 MiB that the test's members share, so that the
 * budget is what refuses), with up to four more settings (NULL for none). */
static void turn_start(child *c, const char *name, const char *me, const char *e1,
                       const char *e2, const char *e3, const char *e4)
{
    char grp[96], dirv[200], mev[64], shared[200];
    snprintf(grp, sizeof(grp), "CUPOOL_GROUP=%s", name);
    snprintf(dirv, sizeof(dirv), "TURN_DIR=%s", turn_dir);
    snprintf(mev, sizeof(mev), "TURN_ME=%s", me);
    snprintf(shared, sizeof(shared), "SIMCUDA_SHARED=%s/device", turn_dir);
    spawn(c, "turn", grp, "CUPOOL_GROUP_MAX_RESERVED=100M", "SIMCUDA_CAPACITY=209715200",
          dirv, mev, shared, e1, e2, e3, e4, NULL);
}

/* A fresh directory for the turns of one test, named tag. */
static void turn_fresh(const char *tag)
{
    snprintf(turn_dir, sizeof(turn_dir), "%s/turn-%s", pages, tag);
    remove_tree(turn_dir);
    assert_int_equal(mkdir(turn_dir, 0700), 0);
}

/* Waits for the file <turn_dir>/<name>, then settle_ms more. */
static void turn_wait(const char *name, int settle_ms)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", turn_dir, name);
    wait_for_file_then(path, (useconds_t)settle_ms * 1000);
}

/* Waits (up to 60 s) for `cupool stat --group group` to show pid waiting
 * in place (1 = next). */
static void turn_queued(const char *group, int pid, int place)
{
    char cmd[512], out[4096], want[96];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --group %s", run_pages,
             group);
    snprintf(want, sizeof(want), "waiting %d: pid %d ", place, pid);
    for (int i = 0; i < 600; i++) {
        if (shell(cmd, out, sizeof(out)) == 0 && strstr(out, want))
            return;
        usleep(100000);
    }
    fail_msg("no \"%s\" in:\n%s", want, out);
}

static void turn_touch(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", turn_dir, name);
    close(open(path, O_WRONLY | O_CREAT, 0600));
}

/* The time (CLOCK_REALTIME ns) on the line of out that starts with what. */
static uint64_t turn_time(const char *out, const char *what)
{
    const char *at = strstr(out, what);
    assert_non_null(at);
    unsigned long long t = 0;
    assert_int_equal(sscanf(at + strlen(what), " %llu", &t), 1);
    return t;
}

/* A member refused because another member's memory is in use waits for
 * its turn, shown by cupool stat --group, and gets the memory as the
 * holder frees it: at once when the holder exits, through an ask when it
 * stays on with the memory in its cache. With CUPOOL_GROUP_WAIT=0 (the
 * behaviour before) it fails; past a short CUPOOL_GROUP_WAIT it fails
 * and says why. */
static void test_group_turn_wait(void **s)
{
    (void)s;
    static char aout[sizeof(((result *)0)->out)];
    char cmd[512], out[4096], want[128], linger[320], until[320];
    for (int k = 0; k < 2; k++) {
        turn_fresh(k ? "linger" : "exit");
        /* The holder that stays on keeps its memory cached until the
         * waiter got it (up to 20 s): only the ask can give it the
         * memory while the holder stays. */
        if (k)
            snprintf(linger, sizeof(linger), "TURN_LINGER_UNTIL=%s/b.got", turn_dir);
        else
            snprintf(linger, sizeof(linger), "TURN_LINGER_MS=0");
        /* The holder holds until the waiter is seen waiting (a fixed
         * 800 ms let a TSan waiter on a loaded machine come too late). */
        snprintf(until, sizeof(until), "TURN_UNTIL=%s/a.go", turn_dir);
        child a, b;
        turn_start(&a, "tw", "a", until, linger, NULL, NULL);
        turn_wait("a.got", 0);
        turn_start(&b, "tw", "b", "TURN_HOLD_MS=0", NULL, NULL, NULL);
        turn_wait("b.asking", 0);
        /* Queued (polled: a fixed settle of 200 ms was too short for a
         * TSan start on a loaded machine), then the whole line. */
        turn_queued("tw", b.pid, 1);
        snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --group tw", run_pages);
        assert_int_equal(shell(cmd, out, sizeof(out)), 0);
        snprintf(want, sizeof(want), "waiting 1: pid %d (rt_prog) for 60.0M on device 0, for ",
                 b.pid);
        if (!strstr(out, want))
            fail_msg("no \"%s\" in:\n%s", want, out);
        turn_touch("a.go");
        snprintf(aout, sizeof(aout), "%s", finish(&a, "turn a", 0)->out);
        result *r = finish(&b, "turn b", 0);
        assert_int_equal(r->status, 0);
        double ms = (double)(turn_time(r->out, "got") - turn_time(aout, "freeing")) / 1e6;
        print_message("the holder %s: the waiter got the memory %.1f ms after its free\n",
                      k ? "stays" : "exits", ms);
        assert_true(ms >= 0);
        if (k && !strstr(aout, "stayed until the file came"))
            fail_msg("the waiter got the memory only once the holder left:\n%s", aout);
    }
    turn_fresh("nowait");
    static const char *const waits[] = {"CUPOOL_GROUP_WAIT=0", "CUPOOL_GROUP_WAIT=300ms"};
    for (int k = 0; k < 2; k++) {
        /* The holder holds until the waiter was refused. */
        snprintf(until, sizeof(until), "TURN_UNTIL=%s/%s.go", turn_dir, k ? "a1" : "a0");
        child a, b;
        turn_start(&a, "tw", k ? "a1" : "a0", until, NULL, NULL, NULL);
        turn_wait(k ? "a1.got" : "a0.got", 0);
        turn_start(&b, "tw", k ? "b1" : "b0", waits[k], NULL, NULL, NULL);
        result *r = finish(&b, "turn b", 1);
        assert_int_equal(r->status, 1);
        unsigned long ms = 0;
        assert_non_null(strstr(r->out, "refused after"));
        assert_int_equal(sscanf(strstr(r->out, "refused after"), "refused after %lu", &ms), 1);
        print_message("%s: refused after %lu ms\n", waits[k], ms);
        if (k) { /* its own wait, the holder holding on */
            assert_true(ms >= 300);
            assert_non_null(strstr(r->err, "stayed in use for all of CUPOOL_GROUP_WAIT"));
        }
        turn_touch(k ? "a1.go" : "a0.go");
        assert_int_equal(finish(&a, "turn a", 0)->status, 0);
    }
}

/* Four members ask for 60 MiB of a 100 MiB budget one after the other
 * (each queued before the next starts) while a fifth holds 60 MiB, each
 * taking its turn for 100 ms: whether they got their turns in the order
 * they came (in order by chance: 1 in 24). */
static bool turn_fifo_round(const char *name)
{
    turn_fresh(name);
    char go[256];
    snprintf(go, sizeof(go), "TURN_UNTIL=%s/go", turn_dir);
    enum { N = 4 };
    child a, w[N];
    static const char *const names[N] = {"w0", "w1", "w2", "w3"};
    turn_start(&a, "tf", "a", go, NULL, NULL, NULL);
    turn_wait("a.got", 0);
    for (int i = 0; i < N; i++) {
        char asking[32];
        turn_start(&w[i], "tf", names[i], "TURN_HOLD_MS=100", NULL, NULL, NULL);
        snprintf(asking, sizeof(asking), "%s.asking", names[i]);
        turn_wait(asking, 0);
        /* Queued, not only asking: a start slower than the settle it
         * once had (TSan, a loaded machine) let a later one in first. */
        turn_queued("tf", w[i].pid, i + 1);
    }
    turn_touch("go");
    assert_int_equal(finish(&a, "turn a", 0)->status, 0);
    uint64_t got[N];
    for (int i = 0; i < N; i++) {
        result *r = finish(&w[i], "turn w", 0);
        assert_int_equal(r->status, 0);
        got[i] = turn_time(r->out, "got");
    }
    bool ordered = true;
    for (int i = 1; i < N; i++) {
        print_message("turn %d at %+.0f ms\n", i, ((double)got[i] - (double)got[i - 1]) / 1e6);
        ordered &= got[i - 1] < got[i];
    }
    return ordered;
}

/* Waiters get their turns in the order they came. A waiter whose turn
 * came keeps its place until its allocation is done (group_wait_taking):
 * before, the next one could take the room in between, and the turns came
 * out of order, rarely, on a loaded machine (test_stats'
 * test_group_turn_held_while_taking checks that step alone). */
static void test_group_turn_fifo(void **s)
{
    (void)s;
    assert_true(turn_fifo_round("fifo"));
}

/* Two members each hold memory and each wait for the other's: the last to
 * arrive fails at once, its report naming both and the deadlock; the
 * other then gets its turn. */
static void test_group_turn_deadlock(void **s)
{
    (void)s;
    turn_fresh("deadlock");
    char after_b[256], after_a[256];
    snprintf(after_b, sizeof(after_b), "TURN_MORE_AFTER=%s/b.got", turn_dir);
    snprintf(after_a, sizeof(after_a), "TURN_MORE_AFTER=%s/b.go", turn_dir);
    child a, b;
    turn_start(&a, "td", "a", "TURN_MORE_MIB=32", after_b, "TURN_HOLD_MS=100", NULL);
    turn_wait("a.got", 0);
    turn_start(&b, "td", "b", "TURN_MIB=32", "TURN_MORE_MIB=32", after_a, NULL);
    /* b asks for more only once a waits (it once asked between a's
     * "a.more" and a's request, and a was the last to arrive). */
    turn_wait("a.more", 0);
    turn_queued("td", a.pid, 1);
    turn_touch("b.go");
    result *r = finish_within(&b, "turn b", 1, 30, "its refusal at once (the group's deadlock "
                              "check, group_wait_stuck)");
    assert_int_equal(r->status, 1);
    unsigned long ms = 0;
    assert_non_null(strstr(r->out, "refused after"));
    assert_int_equal(sscanf(strstr(r->out, "refused after"), "refused after %lu", &ms), 1);
    print_message("the last to arrive failed after %lu ms\n", ms);
    /* At once: the check takes 50 ms of everyone waiting; without it the
     * member waits out CUPOOL_GROUP_WAIT (10 minutes). 20 s leaves a
     * loaded machine room. */
    assert_true(ms < 20000);
    assert_non_null(strstr(r->err, "(a deadlock)"));
    char pa[64], pb[64];
    snprintf(pa, sizeof(pa), "pid %d (rt_prog) holds 60.00 MiB", a.pid);
    snprintf(pb, sizeof(pb), "pid %d (rt_prog) holds 32.00 MiB", b.pid);
    if (!strstr(r->err, pa) || !strstr(r->err, pb))
        fail_msg("the report names not both:\n%s", r->err);
    r = finish_within(&a, "turn a", 0, 30, "its turn once the other member failed");
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "got more"));
}

/* A waiter killed at the head of the queue holds up nobody; a holder
 * killed gives its memory to the waiter at once. */
static void test_group_turn_killed(void **s)
{
    (void)s;
    turn_fresh("killed");
    char go[256];
    snprintf(go, sizeof(go), "TURN_UNTIL=%s/go", turn_dir);
    child a, b, c;
    turn_start(&a, "tk", "a", go, NULL, NULL, NULL);
    turn_wait("a.got", 0);
    turn_start(&b, "tk", "b", "TURN_HOLD_MS=0", NULL, NULL, NULL);
    turn_wait("b.asking", 0);
    turn_queued("tk", b.pid, 1);
    turn_start(&c, "tk", "c", "TURN_HOLD_MS=0", NULL, NULL, NULL);
    turn_wait("c.asking", 0);
    turn_queued("tk", c.pid, 2);
    kill(b.pid, SIGKILL);
    finish(&b, "turn b", 128 + SIGKILL);
    turn_touch("go");
    assert_int_equal(finish_within(&a, "turn a", 0, 30, "its end once told to")->status, 0);
    assert_int_equal(finish_within(&c, "turn c", 0, 30, "its turn past the killed waiter "
                                   "at the head of the queue")->status, 0);
    turn_fresh("killed-holder");
    snprintf(go, sizeof(go), "TURN_UNTIL=%s/never", turn_dir);
    turn_start(&a, "tk", "a", go, NULL, NULL, NULL);
    turn_wait("a.got", 0);
    turn_start(&b, "tk", "b", "TURN_HOLD_MS=0", NULL, NULL, NULL);
    turn_wait("b.asking", 0);
    turn_queued("tk", b.pid, 1);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t killed = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
    kill(a.pid, SIGKILL);
    finish(&a, "turn a", 128 + SIGKILL);
    result *r = finish_within(&b, "turn b", 0, 30, "the memory of the holder killed");
    assert_int_equal(r->status, 0);
    double ms = (double)(turn_time(r->out, "got") - killed) / 1e6;
    print_message("the holder killed: the waiter got the memory %.0f ms after\n", ms);
    /* The dead are reaped every 50 ms; without it the waiter waits out
     * CUPOOL_GROUP_WAIT (10 minutes). */
    assert_true(ms < 10000);
}

const struct CMUnitTest shim_turn_tests[] = {
    cmocka_unit_test_setup_teardown(test_group_turn_wait, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_turn_fifo, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_turn_deadlock, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_turn_killed, pages_setup, pages_teardown),
};
const size_t shim_turn_count = sizeof(shim_turn_tests) / sizeof(shim_turn_tests[0]);
