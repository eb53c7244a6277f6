/*
 * test_stats.c - the formatters and the live page. JSON is read back by a
 * real parser (Python's json), Prometheus output is checked by promtool
 * (Debian's prometheus package), and every field of the field lists must
 * appear in every format.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "stats.h"

#define MIB ((uint64_t)1 << 20)
#define GIB ((uint64_t)1 << 30)

static char buf[1 << 18];

/* A view with distinct, recognisable numbers in every field. */
static void sample(stats_view *v, const char *comm)
{
    memset(v, 0, sizeof(*v));
    v->pid = 4242;
    snprintf(v->comm, sizeof(v->comm), "%s", comm);
    v->updated_ns = 1795244510000000000ull;
    v->flush_signal = 10;
    v->ndevices = 2;
    for (int k = 0; k < 2; k++) {
        stats_device *d = &v->dev[k];
        uint64_t n = 1000;
        d->device = k;
#define X(name, unit, kind, help) d->name = n++;
        STATS_DEVICE_FIELDS(X)
#undef X
        d->allocated = GIB;
        d->reserved = 2 * GIB;
        d->cached = GIB;
        d->largest_free = GIB / 4;
        d->outside_pool = k ? STATS_UNKNOWN : 518 * MIB;
    }
    uint64_t n = 7000;
#define X(name, unit, kind, help) v->proc.name = n++;
    STATS_PROCESS_FIELDS(X)
#undef X
}

static void test_fragmentation(void **s)
{
    (void)s;
    stats_device d = {.cached = 100, .largest_free = 25};
    assert_true(stats_fragmentation(&d) > 0.749 && stats_fragmentation(&d) < 0.751);
    d.cached = 0;
    assert_true(stats_fragmentation(&d) == 0.0);
}

static void test_table(void **s)
{
    (void)s;
    stats_view v;
    sample(&v, "trainer");
    const stats_view *one = &v;
    size_t n = stats_format_table(&one, 1, buf, sizeof(buf));
    assert_int_equal(n, strlen(buf));
    assert_non_null(strstr(buf, "ALLOCATED"));
    assert_non_null(strstr(buf, "4242    trainer"));
    assert_non_null(strstr(buf, "1.00 GiB"));
    assert_non_null(strstr(buf, "2.00 GiB"));
    assert_non_null(strstr(buf, "518.00 MiB"));
    assert_non_null(strstr(buf, "75%")); /* fragmentation */
    /* Two devices: a header and two rows. */
    int lines = 0;
    for (char *c = buf; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 3);
}

static void test_truncation_reports_needed_length(void **s)
{
    (void)s;
    stats_view v;
    sample(&v, "trainer");
    char small[64];
    size_t need = stats_format_json(&v, small, sizeof(small));
    assert_true(need > sizeof(small));
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_int_equal(stats_format_json(&v, buf, sizeof(buf)), need);
}

static void test_every_field_in_every_format(void **s)
{
    (void)s;
    stats_view v;
    sample(&v, "trainer");
    static char json[1 << 16], detail[1 << 16], prom[1 << 17];
    const stats_view *one = &v;
    stats_format_json(&v, json, sizeof(json));
    stats_format_detail(&v, detail, sizeof(detail));
    stats_format_prometheus(&one, 1, prom, sizeof(prom));
    enum { is_BYTES = 1, is_COUNT = 0, is_GAUGE = 0, is_COUNTER = 1 };
    char key[96];
#define X(name, unit, kind, help)                                             \
    snprintf(key, sizeof(key), "\"%s\":", #name);                             \
    if (!strstr(json, key)) fail_msg("%s missing from JSON", #name);          \
    if (!strstr(detail, " " #name " ")) fail_msg("%s missing", #name);        \
    snprintf(key, sizeof(key), "cupool_%s%s%s{", #name,                       \
             is_##unit ? "_bytes" : "", is_##kind ? "_total" : "");           \
    if (!strstr(prom, key)) fail_msg("%s missing from Prometheus", key);
    STATS_DEVICE_FIELDS(X)
    STATS_PROCESS_FIELDS(X)
#undef X
}

static void test_json_parses(void **s)
{
    (void)s;
    stats_view v;
    sample(&v, "a\"b\\c\nd");
    stats_format_json(&v, buf, sizeof(buf));
    FILE *py = popen(
        "python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); "
        "assert d[\"pid\"]==4242 and d[\"comm\"]==\"a\\\"b\\\\c\\nd\", d[\"comm\"]; "
        "v=d[\"devices\"]; assert len(v)==2 and v[0][\"allocated\"]==2**30; "
        "assert v[0][\"outside_pool\"]==518*2**20 and v[1][\"outside_pool\"] is None; "
        "assert abs(v[0][\"fragmentation\"]-0.75)<1e-9; "
        "assert d[\"process\"][\"foreign_frees\"]==7000'", "w");
    assert_non_null(py);
    fputs(buf, py);
    assert_int_equal(pclose(py), 0);
}

static void test_prometheus_passes_promtool(void **s)
{
    (void)s;
    stats_view a, b;
    sample(&a, "trainer \"x\"");
    sample(&b, "other");
    b.pid = 99;
    const stats_view *both[2] = {&a, &b};
    stats_format_prometheus(both, 2, buf, sizeof(buf));
    assert_non_null(strstr(buf, "# TYPE cupool_allocated_bytes gauge\n"));
    assert_non_null(strstr(buf, "# TYPE cupool_allocs_total counter\n"));
    assert_non_null(strstr(buf, "cupool_allocated_bytes{pid=\"4242\",comm=\"trainer "
                                "\\\"x\\\"\",device=\"0\"} 1073741824\n"));
    /* An unknown figure is left out, not printed as a number. */
    assert_null(strstr(buf, "cupool_outside_pool_bytes{pid=\"99\",comm=\"other\",device=\"1\"}"));
    char path[] = "/tmp/cupool-prom-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, strlen(buf)), (ssize_t)strlen(buf));
    close(fd);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", path);
    int st = system(cmd);
    unlink(path);
    if (st != 0)
        fail_msg("promtool check metrics failed (is Debian's prometheus "
                 "package installed? .ci/run installs it)");
}

static char dir[64];

static int page_setup(void **s)
{
    (void)s;
    snprintf(dir, sizeof(dir), "/tmp/cupool-pages-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    setenv("CUPOOL_PAGE_DIR", dir, 1);
    return 0;
}

static int page_teardown(void **s)
{
    (void)s;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

static void test_page_round_trip(void **s)
{
    (void)s;
    stats_page *p = stats_page_create();
    assert_non_null(p);
    char path[256];
    snprintf(path, sizeof(path), "%s/cupool-%u-%d", dir, (unsigned)getuid(), (int)getpid());
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600); /* this user only */
    stats_view v, r;
    sample(&v, "self");
    v.pid = (int32_t)getpid();
    stats_page_publish(p, &v);
    assert_int_equal(stats_page_read((int)getpid(), &r), 0);
    assert_int_equal(r.ndevices, 2);
    assert_memory_equal(&r.dev[0], &v.dev[0], sizeof(v.dev[0]));
    assert_memory_equal(&r.proc, &v.proc, sizeof(v.proc));
    int pids[8];
    assert_int_equal(stats_page_list(pids, 8, true, NULL), 1);
    assert_int_equal(pids[0], getpid());
    stats_page_remove(p);
    assert_int_equal(stats_page_read((int)getpid(), &r), -ENOENT);
}

static void test_stale_page_is_cleaned(void **s)
{
    (void)s;
    pid_t child = fork();
    if (child == 0) {
        stats_page *p = stats_page_create(); /* and exits without removing */
        stats_view v;
        sample(&v, "child");
        stats_page_publish(p, &v);
        _exit(p ? 0 : 1);
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_int_equal(WEXITSTATUS(st), 0);
    stats_view r;
    assert_int_equal(stats_page_read(child, &r), -ESRCH);
    int pids[8];
    size_t removed = 0;
    assert_int_equal(stats_page_list(pids, 8, true, &removed), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(stats_page_read(child, &r), -ENOENT);
}

static void test_foreign_file_is_not_a_page(void **s)
{
    (void)s;
    char path[256];
    snprintf(path, sizeof(path), "%s/cupool-%u-%d", dir, (unsigned)getuid(), (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 4096; i++)
        fputs("garbage!", f);
    fclose(f);
    stats_view r;
    assert_int_equal(stats_page_read((int)getpid(), &r), -EPROTO);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fragmentation),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_truncation_reports_needed_length),
        cmocka_unit_test(test_every_field_in_every_format),
        cmocka_unit_test(test_json_parses),
        cmocka_unit_test(test_prometheus_passes_promtool),
        cmocka_unit_test_setup_teardown(test_page_round_trip, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_stale_page_is_cleaned, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_foreign_file_is_not_a_page, page_setup, page_teardown),
    };
    return cmocka_run_group_tests_name("stats", tests, NULL, NULL);
}
