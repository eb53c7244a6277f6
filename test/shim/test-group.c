/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-group.c - CUPOOL_GROUP: phases taken in turn, a racing budget, killed and
 * ending members, the budget's forms and its refusals.
 */
#include "harness.h"

/* ---- CUPOOL_GROUP ------------------------------------------------------------ */

/* Two processes take phases in turn on one simulated device of 100 MiB
 * (SIMCUDA_SHARED), each phase needing 60 MiB, which the phase before
 * leaves in its process's cache. extra: the group's settings, or NULL.
 * Returns how many of the two got every phase; their statistics (JSON at
 * exit) in pages/stats.a and stats.b. */
static const char *phases_a_extra; /* one more setting of the first process */

static int group_phases(const char *g1, const char *g2)
{
    static char dirv[128], shared[160], sa[160], sb[160];
    snprintf(dirv, sizeof(dirv), "PHASE_DIR=%s", pages);
    snprintf(shared, sizeof(shared), "SIMCUDA_SHARED=%s/device", pages);
    snprintf(sa, sizeof(sa), "CUPOOL_STATS_FILE=%s/stats.a", pages);
    snprintf(sb, sizeof(sb), "CUPOOL_STATS_FILE=%s/stats.b", pages);
    char cmd[1024], out[64];
    snprintf(cmd, sizeof(cmd), "rm -f %s/device %s/a.* %s/b.* %s/stats.*", pages, pages,
             pages, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    child a, b;
    spawn(&a, "phases", dirv, shared, sa, "SIMCUDA_CAPACITY=104857600", "PHASE_ME=a",
          "PHASE_OTHER=b", "PHASE_FIRST=1", "CUPOOL_STATS_AT_EXIT=1",
          "CUPOOL_STATS_FORMAT=json", phases_a_extra ? phases_a_extra : "PHASE_A=1", g1, g2,
          NULL);
    spawn(&b, "phases", dirv, shared, sb, "SIMCUDA_CAPACITY=104857600", "PHASE_ME=b",
          "PHASE_OTHER=a", "CUPOOL_STATS_AT_EXIT=1", "CUPOOL_STATS_FORMAT=json", g1, g2,
          NULL);
    int ok = finish(&a, "phases a", 0)->status == 0;
    return ok + (finish(&b, "phases b", 0)->status == 0);
}

/* Without a group the second process fails (the first holds its cache);
 * as a group both finish: each, refused by the group's budget, asked the
 * other to flush, and the other did. */
static void test_group_phases(void **s)
{
    (void)s;
    assert_int_equal(group_phases(NULL, NULL), 1);
    assert_int_equal(group_phases("CUPOOL_GROUP=phases", "CUPOOL_GROUP_MAX_RESERVED=100M"), 2);
    char cmd[512], out[256];
    snprintf(cmd, sizeof(cmd), "cat %s/stats.a %s/stats.b | python3 -c 'import json,sys; "
             "p=[json.loads(l)[\"process\"] for l in sys.stdin]; "
             "print(all(x[\"group_reclaims\"] >= 1 and x[\"group_flushes\"] >= 1 and "
             "x[\"flushed\"] >= 60 << 20 for x in p), p[0][\"group_reclaims\"] + "
             "p[1][\"group_reclaims\"])'", pages, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    print_message("group phases: %s", out);
    assert_non_null(strstr(out, "True"));
    /* The first, done, holds the device 2 s more as its process ends,
     * after cupool's destructor left the group: the second's last phase
     * waits for it (the member that left stays in the group as ending
     * until its process is gone; it was forgotten at once, and the
     * second, alone, failed, once in a loaded run of make test). */
    phases_a_extra = "SIMCUDA_EXIT_HOLD_MS=2000";
    int both = group_phases("CUPOOL_GROUP=phases", "CUPOOL_GROUP_MAX_RESERVED=100M");
    phases_a_extra = NULL;
    assert_int_equal(both, 2);
}

/* Eight processes race on one budget of 64 MiB: a reader that sums what
 * every member holds, under the group's lock, never sees more. */
static void test_group_race(void **s)
{
    (void)s;
    child c[8];
    for (int i = 0; i < 8; i++)
        spawn(&c[i], "group_race", "CUPOOL_GROUP=race", "CUPOOL_GROUP_MAX_RESERVED=64M",
              "CUPOOL_LOG=off", "RACE_ITERS=300", NULL);
    char cmd[512], out[256];
    snprintf(cmd, sizeof(cmd), "for i in $(seq 200); do CUPOOL_PAGE_DIR=%s " READER
             " stat --group race --json 2>/dev/null; done | python3 -c 'import json,sys; "
             "r=[json.loads(l) for l in sys.stdin]; "
             "h=[sum(d[\"held\"] for m in g[\"members\"] for d in m[\"devices\"]) for g in r]; "
             "print(len(r), max(h), sum(x > 64 << 20 for x in h))'", run_pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    print_message("readings, most held, readings over the budget: %s", out);
    int n = 0;
    unsigned long most = 0, over = 1;
    assert_int_equal(sscanf(out, "%d %lu %lu", &n, &most, &over), 3);
    assert_true(n > 10 && most > 0);
    assert_int_equal(over, 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(finish(&c[i], "group_race", 0)->status, 0);
}

/* A member killed with SIGKILL holds nothing: readers no longer list it,
 * and a new member gets the room its share held. */
static void test_group_killed_member(void **s)
{
    (void)s;
    char cmd[512], out[1024];
    child a, b;
    serve_start(&a, "ga", "CUPOOL_GROUP=killed", "CUPOOL_GROUP_MAX_RESERVED=16M");
    kill(a.pid, SIGKILL);
    finish(&a, "serve", 128 + SIGKILL);
    double t0 = now_s();
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --group killed", pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_true(now_s() - t0 < 10.0); /* not held by the dead member's lock */
    assert_non_null(strstr(out, "0 members"));
    serve_start(&b, "gb", "CUPOOL_GROUP=killed", "CUPOOL_GROUP_MAX_RESERVED=16M");
    kill(b.pid, SIGTERM);
    result *r = finish(&b, "serve", 0);
    assert_int_equal(r->status, 0);
    assert_null(strstr(r->err, "out of memory"));
}

/* A member whose program is done but whose process still holds its
 * framework's cache (PyTorch keeps it until the process goes; a flush
 * asked of a finalizing interpreter returns nothing) is marked ending, and
 * the member it refused waits for it to go instead of failing: python
 * caches 60 MiB of a 100 MiB device shared with phases, and ends slowly. */
static void test_group_ending_member(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    static char simenv[PATH_MAX + 16], ready[160], dirv[128], shared[160];
    sim_lib_env(simenv, sizeof(simenv));
    snprintf(ready, sizeof(ready), "READY=%s/a.0", pages);
    snprintf(dirv, sizeof(dirv), "PHASE_DIR=%s", pages);
    snprintf(shared, sizeof(shared), "SIMCUDA_SHARED=%s/device", pages);
    char *env[] = {simenv, ready, shared, "SIMCUDA_CAPACITY=104857600", "CUPOOL_GROUP=ending",
                   "CUPOOL_GROUP_MAX_RESERVED=100M", NULL};
    child a, b;
    python_start(&a, "test/fw_prog.py", "ending", env);
    spawn(&b, "phases", dirv, shared, "SIMCUDA_CAPACITY=104857600", "PHASES=1", "PHASE_ME=b",
          "PHASE_OTHER=a", "CUPOOL_GROUP=ending", "CUPOOL_GROUP_MAX_RESERVED=100M", NULL);
    assert_int_equal(finish(&a, "fw_prog.py ending", 0)->status, 0);
    result *r = finish(&b, "phases", 0);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "phase 0: 15 of 15 blocks"));
}

/* One process alone in a group on a 100 MiB simulated device asks for
 * 60 MiB: what the group's budget lets it have, and `stat --group` after
 * (the segment outlives its members). */
static int group_budget_got(const char *name, const char *cap, const char *cap0, char *stat,
                            size_t len, int expect)
{
    static char group[96], shared[160], dirv[128];
    snprintf(group, sizeof(group), "CUPOOL_GROUP=%s", name);
    snprintf(shared, sizeof(shared), "SIMCUDA_SHARED=%s/device-%s", pages, name);
    snprintf(dirv, sizeof(dirv), "PHASE_DIR=%s", pages);
    child c;
    spawn(&c, "phases", dirv, shared, "SIMCUDA_CAPACITY=104857600", "PHASES=1",
          "PHASE_ME=x", "PHASE_OTHER=y", "PHASE_FIRST=1", group, cap, cap0, NULL);
    result *r = finish(&c, "phases", expect);
    assert_int_equal(r->status, expect);
    int got = -1;
    assert_int_equal(sscanf(r->out, "phase 0: %d of", &got), 1);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --group %s", run_pages, name);
    assert_int_equal(shell(cmd, stat, len), 0);
    return got;
}

/* A budget per device: a percentage of the device's memory, and a
 * device's own budget over the one for every device. */
static void test_group_budget_forms(void **s)
{
    (void)s;
    char out[1024];
    assert_int_equal(group_budget_got("pct", "CUPOOL_GROUP_MAX_RESERVED=50%", NULL, out,
                                      sizeof(out), 1), 12);
    assert_non_null(strstr(out, "budget 50% per device"));
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " top --count 1 --group pct",
             run_pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "cupool top"));
    assert_non_null(strstr(out, "\ngroup pct: budget 50% per device, 0 members"));
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " top --count 1 --group nosuch",
             run_pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1);
    assert_int_equal(group_budget_got("dev0", "CUPOOL_GROUP_MAX_RESERVED=8M",
                                      "CUPOOL_GROUP_MAX_RESERVED_0=80%", out, sizeof(out), 0),
                     15);
    assert_non_null(strstr(out, "budget 80% per device"));
    assert_int_equal(group_budget_got("dev1", "CUPOOL_GROUP_MAX_RESERVED=40M",
                                      "CUPOOL_GROUP_MAX_RESERVED_1=80M", out, sizeof(out), 1),
                     10);
    assert_non_null(strstr(out, "budget 40.00 MiB per device, 80.00 MiB on device 1"));
}

/* A segment another version wrote, or garbage, is refused in one line and
 * the process runs on under its own cap. */
static void test_group_corrupt_segment(void **s)
{
    (void)s;
    char path[256], direnv[128];
    snprintf(path, sizeof(path), "%s/cupool-%u", pages, (unsigned)geteuid());
    mkdir(path, 0700);
    snprintf(path, sizeof(path), "%s/cupool-%u/group-%lu-bad", pages, (unsigned)geteuid(),
             pid_ns_ino());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    char junk[4096];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    result *r = run("pairs", direnv, "CUPOOL_GROUP=bad", "CUPOOL_GROUP_MAX_RESERVED=1G", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "CUPOOL_GROUP=bad: cannot join: a file there is not a "
                                   "group segment of this user"));
}

/* Three members of group name (a budget of 8 MiB) race, their pages in
 * the test's directory: how many requests they were refused together.
 * None may say it could not join. */
/* Memory passed on and refused says which budget refused: the cap and its
 * size, or the group's budget and who holds it (it said "the group's
 * budget (CUPOOL_GROUP); the cap 0 B would be exceeded"). */
static void test_driver_passed_refusal_names_its_budget(void **s)
{
    (void)s;
    program = "drv_prog";
    result *r = run("create_refused", "CUPOOL_MAX_RESERVED=8M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cuMemCreate(10.00 MiB) refused: the cap 8.00 MiB would "
                                   "be exceeded"));
    static char direnv[128];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    r = run("create_refused", direnv, "CUPOOL_GROUP=passed", "CUPOOL_GROUP_MAX_RESERVED=8M",
            NULL);
    program = "rt_prog";
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cuMemCreate(10.00 MiB) refused: the group's budget "
                                   "(CUPOOL_GROUP) would be exceeded"));
    assert_non_null(strstr(r->err, "group passed: budget 8.00 MiB"));
    assert_null(strstr(r->err, "the cap"));
}

#define GROUP_CAUSE "  cause: the group's budget"

/* How many times needle occurs in hay. */
static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* members members of group name race on its budget (the size, as
 * CUPOOL_GROUP_MAX_RESERVED takes it), each under cap (its own
 * CUPOOL_MAX_RESERVED, or NULL), with the default segment sizes (larger
 * than most requests); the refusals. Every report gives cause (a line's
 * start), or, where cause is NULL, none names the group's budget; none
 * says never. Before, the report judged by the budgets as they were
 * by then (members' memory moves, a segment is larger than the request):
 * about 1 in 10 blamed CUPOOL_MAX_RESERVED, set or not, where the group's
 * budget refused. */
static int group_members_refused(const char *name, int members, const char *budget,
                                 const char *cap, const char *cause, const char *never)
{
    static char group[96], direnv[128], budget_env[96], cap_env[96];
    snprintf(group, sizeof(group), "CUPOOL_GROUP=%s", name);
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(budget_env, sizeof(budget_env), "CUPOOL_GROUP_MAX_RESERVED=%s", budget);
    snprintf(cap_env, sizeof(cap_env), "CUPOOL_MAX_RESERVED=%s", cap ? cap : "");
    child c[3];
    assert_true(members >= 1 && members <= 3);
    for (int i = 0; i < members; i++)
        spawn(&c[i], "group_race", direnv, group, budget_env, "CUPOOL_GROUP_WAIT=0",
              "CUPOOL_LOG=error", "RACE_ITERS=50", "CUPOOL_SMALL_SEGMENT=8M",
              "CUPOOL_MID_MAX=10M", cap ? cap_env : NULL, NULL);
    int refused = 0, causes = 0;
    for (int i = 0; i < members; i++) {
        result *r = finish(&c[i], "group_race", 0);
        int got = -1;
        assert_int_equal(r->status, 0);
        if (strstr(r->err, "cannot join"))
            fail_msg("member %d: %s", i, r->err);
        assert_int_equal(sscanf(r->out, "refused %d of", &got), 1);
        refused += got;
        int n = occurrences(r->err, "  cause: ");
        int named = occurrences(r->err, cause ? cause : "  cause: the group's budget");
        causes += n;
        if (never && strstr(r->err, never))
            fail_msg("member %d (cap %s, group %s): a report says \"%s\":\n%s", i,
                     cap ? cap : "none", budget, never, r->err);
        if (named != (cause ? n : 0))
            fail_msg("member %d (cap %s, group %s): %d of %d reports say \"%s\":\n%s", i,
                     cap ? cap : "none", budget, named, n,
                     cause ? cause : "  cause: the group's budget", r->err);
    }
    /* The log's rate limit may suppress some reports, never add one. */
    assert_true(causes > 0 && causes <= refused);
    return refused;
}

/* Another user made the user's page directory first (as root: a directory
 * of uid 65534 open to all; else one of the user's open to all), which
 * lasts until root removes it. A group still meets, where no other user
 * can write: in $XDG_RUNTIME_DIR/cupool, or without it in
 * $HOME/.cache/cupool (the file named with the boot's id), where `cupool
 * stat --group` finds it too, and its budget holds: the three members are
 * refused requests as without the squat (each ran alone under its own cap
 * before: 0 refused). HOME and XDG_RUNTIME_DIR are the test's own for its
 * length: the children inherit them. */
static void test_group_squatted_directory(void **s)
{
    (void)s;
    char squat[128], rundir[128], home[128], cmd[1024], out[2048], want[128];
    char *was = getenv("HOME"), old_home[512], old_run[512];
    snprintf(old_home, sizeof(old_home), "%s", was ? was : "/");
    was = getenv("XDG_RUNTIME_DIR");
    snprintf(old_run, sizeof(old_run), "%s", was ? was : "");
    snprintf(squat, sizeof(squat), "%s/cupool-%u", pages, (unsigned)geteuid());
    assert_int_equal(mkdir(squat, 0777), 0);
    assert_int_equal(chmod(squat, 0777), 0);
    if (geteuid() == 0)
        assert_int_equal(chown(squat, 65534, 65534), 0);
    snprintf(rundir, sizeof(rundir), "%s/run", pages);
    snprintf(home, sizeof(home), "%s/home", pages);
    assert_int_equal(mkdir(rundir, 0700), 0);
    assert_int_equal(mkdir(home, 0755), 0);
    setenv("XDG_RUNTIME_DIR", rundir, 1);
    setenv("HOME", home, 1);
    int refused = group_members_refused("squat", 3, "8M", NULL, GROUP_CAUSE, NULL);
    print_message("page directory squatted: 3 members refused %d of 150 requests\n", refused);
    assert_true(refused > 0);
    snprintf(cmd, sizeof(cmd), "ls %s/cupool && CUPOOL_PAGE_DIR=%s " READER
             " stat --group squat", rundir, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "group-%lu-squat\n", pid_ns_ino());
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "group squat: budget 8.00 MiB per device"));
    unsetenv("XDG_RUNTIME_DIR");
    refused = group_members_refused("squath", 3, "8M", NULL, GROUP_CAUSE, NULL);
    print_message("the same without XDG_RUNTIME_DIR: %d refused\n", refused);
    assert_true(refused > 0);
    snprintf(cmd, sizeof(cmd), "ls %s/.cache/cupool && CUPOOL_PAGE_DIR=%s " READER
             " stat --group squath", home, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    setenv("HOME", old_home, 1);
    if (*old_run)
        setenv("XDG_RUNTIME_DIR", old_run, 1);
    snprintf(want, sizeof(want), "-%lu-squath\n", pid_ns_ino());
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "group squath: budget 8.00 MiB per device"));
}

/* Each report names the budget that refused, whichever is the smaller:
 * the group's beside a larger cap of the member's own, the cap beside a
 * larger group's budget. */
static void test_group_report_names_the_budget_that_refused(void **s)
{
    (void)s;
    int refused = group_members_refused("causes", 3, "8M", "64M", GROUP_CAUSE, NULL);
    print_message("cap 64 MiB in a group of 8: 3 members refused %d of 150\n", refused);
    refused = group_members_refused("causes2", 1, "64M", "8M", NULL, NULL);
    print_message("cap 8 MiB in a group of 64: refused %d of 50\n", refused);
    /* Alone in its group: the reports speak of no other member (they said
     * "after its other members flushed" before). */
    refused = group_members_refused("causes3", 1, "8M", NULL, GROUP_CAUSE, "other members");
    print_message("alone in a group of 8 MiB: refused %d of 50\n", refused);
}

const struct CMUnitTest shim_group_tests[] = {
    cmocka_unit_test_setup_teardown(test_group_phases, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_race, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_killed_member, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_ending_member, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_budget_forms, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_corrupt_segment, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_driver_passed_refusal_names_its_budget,
                                    pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_report_names_the_budget_that_refused,
                                    pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_group_squatted_directory, pages_setup,
                                    pages_teardown),
};
const size_t shim_group_count = sizeof(shim_group_tests) / sizeof(shim_group_tests[0]);
