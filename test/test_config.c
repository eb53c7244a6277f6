/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_config.c - the option table and parsers: every accepted form, every
 * rejected one, and that a rejected value prints one clear line and keeps
 * the default.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "config.h"
#include "stats.h"

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

static const char *const *env_table;
static char warned[64][512];
static int nwarned;

static const char *fake_getenv(const char *name)
{
    size_t n = strlen(name);
    for (int i = 0; env_table && env_table[i]; i++)
        if (!strncmp(env_table[i], name, n) && env_table[i][n] == '=')
            return env_table[i] + n + 1;
    return NULL;
}

static void collect(const char *line)
{
    if (nwarned < 64)
        snprintf(warned[nwarned++], sizeof(warned[0]), "%s", line);
}

/* The warning that mentions what, or NULL. */
static const char *warning_with(const char *what)
{
    for (int i = 0; i < nwarned; i++)
        if (strstr(warned[i], what))
            return warned[i];
    return NULL;
}

static int load(const char *const *env, shim_config *c)
{
    env_table = env;
    nwarned = 0;
    return shim_config_load(c, fake_getenv, collect);
}

/* A misspelled option is named with the nearest option, so that a cap
 * does not silently disappear; options, device caps and the tools' own
 * variables are not. */
static void test_unknown_names(void **state)
{
    (void)state;
    char *env[] = {"CUPOOL_MAX_RESERVE=20G", "CUPOOL_FENSE=poll", "CUPOOL_ZZZZZZZZZZ=1",
                   "CUPOOL_MAX_RESERVED=1G", "CUPOOL_MAX_RESERVED_3=1G", "CUPOOL_LIB=/x",
                   "CUPOOL_TRACE_BIN=/y", "CUPOOL_MAX_RESERVED_64=1G", "PATH=/bin",
                   "CUPOOL_\033[2J=1", "CUPOOL_GROUP_MAX_RESERVED_2=10%",
                   "CUPOOL_GROUP_MAX_RESERVED_X=1G", NULL};
    nwarned = 0;
    assert_int_equal(shim_config_unknown(env, collect), 6);
    assert_non_null(warning_with("CUPOOL_GROUP_MAX_RESERVED_X "));
    assert_non_null(strstr(warning_with("CUPOOL_MAX_RESERVE "), "did you mean "
                           "CUPOOL_MAX_RESERVED?"));
    assert_non_null(strstr(warning_with("CUPOOL_FENSE "), "did you mean CUPOOL_FENCE?"));
    assert_null(strstr(warning_with("CUPOOL_ZZZZZZZZZZ"), "did you mean"));
    assert_non_null(warning_with("CUPOOL_MAX_RESERVED_64 ")); /* no device 64 */
    assert_non_null(warning_with("CUPOOL_?[2J")); /* no escape reaches a terminal */
    assert_null(warning_with("\033"));
}

static void test_sizes(void **state)
{
    (void)state;
    static const struct { const char *s; uint64_t v; } ok[] = {
        {"123", 123}, {"64K", 64 << 10}, {"64k", 64 << 10}, {"512MiB", 512 * MIB},
        {"512M", 512 * MIB}, {"20G", 20 * GIB}, {"20GiB", 20 * GIB},
        {"20GB", 20 * GIB}, {"1T", GIB << 10}, {"0", 0}, {"7B", 7},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        assert_int_equal(stats_parse_size(ok[i].s, &v), 0);
        assert_int_equal(v, ok[i].v);
    }
    static const char *const bad[] = {"", "G", "-1", "1.5G", "12 M", "20X",
        "20GiBs", "99999999999999999999", "17179869184G", NULL};
    for (int i = 0; bad[i]; i++) {
        uint64_t v = 42;
        assert_int_equal(stats_parse_size(bad[i], &v), -EINVAL);
        assert_int_equal(v, 42);
    }
}

static void test_caps(void **state)
{
    (void)state;
    shim_cap c;
    assert_int_equal(shim_parse_cap("50%", &c), 0);
    assert_int_equal(c.percent, 50);
    assert_int_equal(shim_cap_bytes(&c, 80 * GIB), 40 * GIB);
    assert_int_equal(shim_parse_cap("100%", &c), 0);
    assert_int_equal(shim_cap_bytes(&c, 80 * GIB + 3), 80 * GIB + 3);
    assert_int_equal(shim_parse_cap("20G", &c), 0);
    assert_int_equal(shim_cap_bytes(&c, 80 * GIB), 20 * GIB);
    assert_int_equal(shim_parse_cap("none", &c), 0);
    assert_int_equal(shim_cap_bytes(&c, 80 * GIB), 0);
    static const char *const bad[] = {"0%", "101%", "%", "5x%", "-5%", "lots", NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(shim_parse_cap(bad[i], &c), -EINVAL);
}

/* CUPOOL_GROUP_WAIT's durations: seconds by default, each unit, no sign,
 * space, fraction, unknown unit or overflow. */
static void test_durations(void **state)
{
    (void)state;
    static const struct { const char *s; uint64_t ms; } ok[] = {
        {"0", 0}, {"600", 600000}, {"30s", 30000}, {"500ms", 500}, {"10m", 600000},
        {"1h", 3600000}, {"0ms", 0}};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t ms = 1;
        assert_int_equal(shim_parse_duration(ok[i].s, &ms), 0);
        assert_int_equal(ms, ok[i].ms);
    }
    static const char *const bad[] = {"", "-1", "1.5s", "10 m", "5d", "s", "ms5",
                                      "99999999999999999999", "9999999999999999h"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t ms = 7;
        assert_int_equal(shim_parse_duration(bad[i], &ms), -EINVAL);
        assert_int_equal(ms, 7);
    }
}

static void test_bools_and_signals(void **state)
{
    (void)state;
    bool b;
    assert_int_equal(shim_parse_bool("on", &b), 0);
    assert_true(b);
    assert_int_equal(shim_parse_bool("FALSE", &b), 0);
    assert_false(b);
    assert_int_equal(shim_parse_bool("2", &b), -EINVAL);
    int s;
    assert_int_equal(shim_parse_signal("USR1", &s), 0);
    assert_int_equal(s, SIGUSR1);
    assert_int_equal(shim_parse_signal("SIGUSR2", &s), 0);
    assert_int_equal(s, SIGUSR2);
    assert_int_equal(shim_parse_signal("none", &s), 0);
    assert_int_equal(s, 0);
    assert_int_equal(shim_parse_signal("RTMIN+3", &s), 0);
    assert_int_equal(s, SIGRTMIN + 3);
    assert_int_equal(shim_parse_signal("KILL", &s), -EINVAL);
    assert_int_equal(shim_parse_signal("RTMIN+999", &s), -EINVAL);
    assert_int_equal(shim_parse_signal("RTMIN+2K", &s), -EINVAL);
}

static void test_defaults(void **state)
{
    (void)state;
    shim_config c;
    assert_int_equal(load(NULL, &c), 0);
    assert_false(c.disable);
    assert_int_equal(c.max_reserved.bytes, 0);
    assert_int_equal(c.max_reserved.percent, 0);
    assert_int_equal(c.release_threshold, UINT64_MAX);
    assert_int_equal(c.fence, SHIM_FENCE_POLL);
    assert_int_equal(c.flush_signal, SIGUSR1);
    assert_int_equal(c.stats_signal, SIGUSR2);
    assert_string_equal(c.stats_file, "");
    assert_int_equal(c.log, SHIM_LOG_WARN);
    pool_config def;
    memset(&def, 0, sizeof(def)); /* padding too: load zeroes c first */
    pool_config_default(&def);
    assert_memory_equal(&c.pool, &def, sizeof(def));
    assert_int_equal(c.cupti, SHIM_AUTO);
    assert_string_equal(c.cupti_lib, "");
    assert_int_equal(c.stitch, SHIM_AUTO);
}

/* CUPOOL_STITCH: auto (the default) stitches exactly when PyTorch's caching
 * allocator is off, which PyTorch decides by its variable being "1" ("0"
 * or anything else leaves its cache on); 1 and 0 whatever PyTorch does. */
static void test_stitch_switch(void **state)
{
    (void)state;
    shim_config c;
    static const char *const none[] = {NULL};
    static const char *const torch_off[] = {"PYTORCH_NO_CUDA_MEMORY_CACHING=1", NULL};
    static const char *const torch_on[] = {"PYTORCH_NO_CUDA_MEMORY_CACHING=0", NULL};
    static const char *const torch_bad[] = {"PYTORCH_NO_CUDA_MEMORY_CACHING=yes", NULL};
    static const char *const on[] = {"CUPOOL_STITCH=on", NULL};
    static const char *const off_torch[] = {"CUPOOL_STITCH=0",
                                            "PYTORCH_NO_CUDA_MEMORY_CACHING=1", NULL};
    assert_int_equal(load(none, &c), 0);
    assert_false(shim_stitch_wanted(&c, fake_getenv));
    assert_int_equal(load(torch_off, &c), 0);
    assert_true(shim_stitch_wanted(&c, fake_getenv));
    assert_int_equal(load(torch_on, &c), 0);
    assert_false(shim_stitch_wanted(&c, fake_getenv));
    assert_int_equal(load(torch_bad, &c), 0);
    assert_false(shim_stitch_wanted(&c, fake_getenv));
    assert_int_equal(load(on, &c), 0);
    assert_int_equal(c.stitch, SHIM_ON);
    assert_true(shim_stitch_wanted(&c, fake_getenv));
    assert_int_equal(load(off_torch, &c), 0);
    assert_int_equal(c.stitch, SHIM_OFF);
    assert_false(shim_stitch_wanted(&c, fake_getenv));
}

static void test_valid_values(void **state)
{
    (void)state;
    static const char *const env[] = {
        "CUPOOL_DISABLE=yes", "CUPOOL_MAX_RESERVED=20G",
        "CUPOOL_MAX_RESERVED_1=50%", "CUPOOL_RELEASE_THRESHOLD=1G",
        "CUPOOL_FENCE=sync", "CUPOOL_FLUSH_SIGNAL=HUP",
        "CUPOOL_STATS_SIGNAL=none", "CUPOOL_STATS_FILE=/tmp/s.%p",
        "CUPOOL_LOG=debug", "CUPOOL_MAX_SPLIT=64M",
        "CUPOOL_FENCE_INTERVAL=1", "CUPOOL_CUPTI=on",
        "CUPOOL_CUPTI_LIB=/opt/cuda/lib64/libcupti.so", "CUPOOL_GROUP_MAX_RESERVED=60%",
        "CUPOOL_GROUP_MAX_RESERVED_2=30G", NULL};
    shim_config c;
    assert_int_equal(load(env, &c), 0);
    assert_int_equal(c.group_max.percent, 60);
    assert_true(c.has_group_dev[2] && !c.has_group_dev[1]);
    assert_int_equal(c.group_max_dev[2].bytes, 30 * GIB);
    assert_int_equal(nwarned, 0);
    assert_true(c.disable);
    assert_int_equal(c.max_reserved.bytes, 20 * GIB);
    assert_true(c.has_dev_cap[1]);
    assert_false(c.has_dev_cap[0]);
    assert_int_equal(c.max_reserved_dev[1].percent, 50);
    assert_int_equal(c.release_threshold, GIB);
    assert_int_equal(c.fence, SHIM_FENCE_SYNC);
    assert_int_equal(c.flush_signal, SIGHUP);
    assert_int_equal(c.stats_signal, 0);
    assert_string_equal(c.stats_file, "/tmp/s.%p");
    assert_int_equal(c.log, SHIM_LOG_DEBUG);
    assert_int_equal(c.pool.max_split, 64 * MIB);
    assert_int_equal(c.pool.fence_interval, 1);
    assert_int_equal(c.cupti, SHIM_ON);
    assert_string_equal(c.cupti_lib, "/opt/cuda/lib64/libcupti.so");
}

static void test_invalid_values_warn_and_keep_default(void **state)
{
    (void)state;
    static const char *const env[] = {
        "CUPOOL_FENCE=bogus", "CUPOOL_MAX_RESERVED=lots",
        "CUPOOL_MAX_RESERVED_3=200%", "CUPOOL_DISABLE=maybe",
        "CUPOOL_FENCE_INTERVAL=0", "CUPOOL_SMALL_MAX=8Q", "CUPOOL_GROUP_MAX_RESERVED_1=0%",
        NULL};
    shim_config c;
    assert_int_equal(load(env, &c), 7);
    assert_int_equal(nwarned, 7);
    assert_false(c.has_group_dev[1]);
    assert_non_null(strstr(warning_with("CUPOOL_GROUP_MAX_RESERVED_1=0% is invalid"),
                           "using CUPOOL_GROUP_MAX_RESERVED"));
    assert_int_equal(c.pool.fence_interval, 64);
    assert_non_null(warning_with("CUPOOL_FENCE_INTERVAL=0 is invalid (expected a whole number from 1 up); using 64"));
    assert_int_equal(c.fence, SHIM_FENCE_POLL);
    assert_int_equal(c.max_reserved.bytes, 0);
    assert_false(c.has_dev_cap[3]);
    assert_false(c.disable);
    /* One line each: the variable, the value, the accepted forms, the
     * default kept. */
    const char *w = warning_with("CUPOOL_MAX_RESERVED=lots is invalid");
    assert_non_null(w);
    assert_non_null(strstr(w, "50%"));
    assert_non_null(strstr(w, "using none"));
    w = warning_with("CUPOOL_FENCE=bogus is invalid");
    assert_non_null(w);
    assert_non_null(strstr(w, "barrier, poll, sync or none"));
    assert_non_null(strstr(w, "using poll"));
    assert_non_null(warning_with("CUPOOL_MAX_RESERVED_3=200% is invalid"));
    assert_non_null(warning_with("CUPOOL_DISABLE=maybe is invalid"));
    for (int i = 0; i < nwarned; i++)
        assert_null(strchr(warned[i], '\n'));
}

static void test_cross_checks(void **state)
{
    (void)state;
    static const char *const same[] = {"CUPOOL_FLUSH_SIGNAL=USR2", NULL};
    shim_config c;
    assert_int_equal(load(same, &c), 1);
    assert_int_equal(c.flush_signal, SIGUSR1);
    assert_int_equal(c.stats_signal, SIGUSR2);
    static const char *const pool_bad[] = {"CUPOOL_SMALL_MAX=16M", NULL};
    assert_int_equal(load(pool_bad, &c), 1);
    assert_int_equal(c.pool.small_max, MIB);
    assert_non_null(warning_with("thresholds"));
    /* A mid segment must hold the largest request it is for. */
    static const char *const mid_bad[] = {"CUPOOL_MID_MAX=16M", "CUPOOL_MID_SEGMENT=8M", NULL};
    assert_int_equal(load(mid_bad, &c), 1);
    assert_int_equal(c.pool.mid_max, 10 * MIB);
    assert_int_equal(c.pool.mid_segment, 20 * MIB);
    assert_non_null(warning_with("CUPOOL_MID_MAX <= CUPOOL_MID_SEGMENT"));
    static const char *const mid_off[] = {"CUPOOL_MID_MAX=0", "CUPOOL_MID_SEGMENT=8M", NULL};
    assert_int_equal(load(mid_off, &c), 0);
    assert_int_equal(c.pool.mid_max, 0);
    static const char *const cupti_none[] = {"CUPOOL_CUPTI=1", "CUPOOL_FENCE=none", NULL};
    assert_int_equal(load(cupti_none, &c), 1);
    assert_int_equal(c.cupti, SHIM_OFF);
    assert_non_null(warning_with("CUPOOL_CUPTI=1 has no fence to skip under CUPOOL_FENCE=none"));
    /* auto (the default) quietly stays off there. */
    static const char *const auto_none[] = {"CUPOOL_FENCE=none", NULL};
    assert_int_equal(load(auto_none, &c), 0);
    assert_int_equal(c.cupti, SHIM_OFF);
    static const char *const cupti_sync[] = {"CUPOOL_CUPTI=1", "CUPOOL_FENCE=sync", NULL};
    assert_int_equal(load(cupti_sync, &c), 0);
    assert_int_equal(c.cupti, SHIM_ON);
    static const char *const cupti_off[] = {"CUPOOL_CUPTI=off", NULL};
    assert_int_equal(load(cupti_off, &c), 0);
    assert_int_equal(c.cupti, SHIM_OFF);
    static const char *const cupti_auto[] = {"CUPOOL_CUPTI=AUTO", NULL};
    assert_int_equal(load(cupti_auto, &c), 0);
    assert_int_equal(c.cupti, SHIM_AUTO);
    static const char *const cupti_bad[] = {"CUPOOL_CUPTI=sometimes", NULL};
    assert_int_equal(load(cupti_bad, &c), 1);
    assert_int_equal(c.cupti, SHIM_AUTO);
    assert_non_null(warning_with("CUPOOL_CUPTI=sometimes is invalid (expected auto, or 1, 0"));
    /* The slack is the poll fence's: a percentage, 0 up, 1000 at most. */
    static const char *const poll[] = {"CUPOOL_FENCE=poll", "CUPOOL_FENCE_SLACK=100", NULL};
    assert_int_equal(load(poll, &c), 0);
    assert_int_equal(c.fence, SHIM_FENCE_POLL);
    assert_int_equal(c.pool.fence_slack, 100);
    static const char *const big[] = {"CUPOOL_FENCE=poll", "CUPOOL_FENCE_SLACK=5000", NULL};
    assert_int_equal(load(big, &c), 1);
    assert_int_equal(c.pool.fence_slack, 1000);
    assert_non_null(warning_with("CUPOOL_FENCE_SLACK is above 1000 percent"));
    static const char *const barrier[] = {"CUPOOL_FENCE=barrier", "CUPOOL_FENCE_SLACK=50", NULL};
    assert_int_equal(load(barrier, &c), 1);
    assert_int_equal(c.pool.fence_slack, 0);
    assert_non_null(warning_with("applies to CUPOOL_FENCE=poll only"));
    static const char *const neg[] = {"CUPOOL_FENCE=poll", "CUPOOL_FENCE_SLACK=-5", NULL};
    assert_int_equal(load(neg, &c), 1);
    assert_non_null(warning_with("CUPOOL_FENCE_SLACK=-5 is invalid (expected a whole number of percent"));
}

/* The README's option table says what the option table says: every
 * option has a row, with the same default where the default is a value
 * (an empty one the README describes in words), and every row is an
 * option (or the per-device form of the cap). */
static void test_readme_lists_every_option(void **state)
{
    (void)state;
    FILE *t = tmpfile(), *r = fopen("README.md", "r");
    assert_non_null(t);
    assert_non_null(r);
    shim_config_describe(fileno(t));
    rewind(t);
    static char readme[1 << 17];
    size_t n = fread(readme, 1, sizeof(readme) - 1, r);
    readme[n] = 0;
    fclose(r);
    char line[1024], name[64], def[64];
    int options = 0;
    while (fgets(line, sizeof(line), t) && sscanf(line, "%63s %63s", name, def) == 2) {
        char row[96];
        snprintf(row, sizeof(row), "\n| `%s` | ", name);
        const char *at = strstr(readme, row);
        if (!at)
            fail_msg("README.md has no row for %s", name);
        if (strcmp(def, "(empty)") != 0) {
            char cell[80];
            snprintf(cell, sizeof(cell), "`%s`", def);
            if (strncmp(at + strlen(row), cell, strlen(cell)) != 0)
                fail_msg("README.md gives %s a default other than %s", name, def);
        }
        options++;
    }
    fclose(t);
    assert_true(options > 20);
    int rows = 0;
    for (const char *at = readme; (at = strstr(at, "\n| `CUPOOL_")) != NULL; at++, rows++) {
        const char *end = strchr(at + 4, '`');
        snprintf(name, sizeof(name), "%.*s", (int)(end - at - 4), at + 4);
        if (strcmp(name, "CUPOOL_MAX_RESERVED_<N>") &&
            strcmp(name, "CUPOOL_GROUP_MAX_RESERVED_<N>") && shim_option_is_flag(name) < 0)
            fail_msg("README.md has a row for %s, which is no option", name);
    }
    assert_int_equal(rows, options + 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_unknown_names),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_bools_and_signals),
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_stitch_switch),
        cmocka_unit_test(test_readme_lists_every_option),
        cmocka_unit_test(test_valid_values),
        cmocka_unit_test(test_invalid_values_warn_and_keep_default),
        cmocka_unit_test(test_cross_checks),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
