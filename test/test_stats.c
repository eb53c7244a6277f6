/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_stats.c - the formatters and the live page. JSON is read back by a
 * real parser (Python's json), Prometheus output is checked by promtool
 * (Debian's prometheus package), and every field of the field lists must
 * appear in every format.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "groupseg.h"
#include "safefile.h"
#include "stats.h"
#include "userns.h"
#include "scratch.h"
#include "skip.h"

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
    v->proc.paused_since = v->proc.paused_needs = 0; /* running (test_paused) */
}

static void test_fragmentation(void **s)
{
    (void)s;
    stats_device d = {.cached = 100, .largest_free = 25};
    assert_true(stats_fragmentation(&d) > 0.749 && stats_fragmentation(&d) < 0.751);
    /* A cache of idle segments alone is kept, not fragmented: a flush or a
     * request under a cap has it back as one segment. */
    d.releasable = 100;
    assert_true(stats_fragmentation(&d) == 0.0);
    /* Idle segments beside live ones: the larger of the two serves. */
    d.releasable = 40;
    assert_true(stats_fragmentation(&d) > 0.599 && stats_fragmentation(&d) < 0.601);
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
    assert_non_null(strstr(buf, "ALLOC"));
    assert_non_null(strstr(buf, "4242    trainer"));
    assert_non_null(strstr(buf, " 1.00G "));
    assert_non_null(strstr(buf, " 2.00G "));
    assert_non_null(strstr(buf, " 518M "));
    assert_non_null(strstr(buf, "75%")); /* fragmentation */
    /* Two devices: a header and two rows, none wider than 80 columns;
     * with PyTorch's own figures read, a line under each row. */
    for (int read = 0; read < 2; read++) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        v.proc.framework_read_at = read ? (uint64_t)now.tv_sec * 1000000000u +
                                              (uint64_t)now.tv_nsec - 3000000000u : 0;
        stats_format_table(&one, 1, buf, sizeof(buf));
        int lines = 0, width = 0, widest = 0;
        for (char *c = buf; *c; c++) {
            lines += *c == '\n';
            width = *c == '\n' ? 0 : width + 1;
            widest = width > widest ? width : widest;
        }
        assert_int_equal(lines, read ? 5 : 3);
        assert_true(widest <= 80);
    }
    assert_non_null(strstr(buf, "  PyTorch dev "));
    assert_non_null(strstr(buf, ", 3s ago\n"));
}

/* A process paused by cupool pause: one line under its rows says since
 * when and what it needs back. */
static void test_paused(void **s)
{
    (void)s;
    stats_view v;
    sample(&v, "trainer");
    const stats_view *one = &v;
    stats_format_table(&one, 1, buf, sizeof(buf));
    assert_null(strstr(buf, "paused"));
    v.proc.paused_since = 1795244510000000000ull;
    v.proc.paused_needs = 3 * GIB;
    stats_format_table(&one, 1, buf, sizeof(buf));
    assert_non_null(strstr(buf, "  paused (cupool pause) since "));
    assert_non_null(strstr(buf, ": needs 3.00G of device memory back to resume\n"));
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
             is_##unit && !strstr(#name "$", "_bytes$") ? "_bytes" : "",      \
             is_##kind ? "_total" : "");                                      \
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

/* The detail dump: a figure nobody could measure reads "unknown" (it read
 * 18446744073709551615 (-)), and every value starts in the same column. */
static void test_detail_unknown_and_aligned(void **s)
{
    (void)s;
    stats_view v;
    sample(&v, "self");
    stats_format_detail(&v, buf, sizeof(buf));
    assert_null(strstr(buf, "18446744073709551615"));
    assert_non_null(strstr(buf, "device 1  outside_pool                      unknown\n"));
    /* 10 columns for who, 20 for the name: column 30 is always the space
     * before the value's field, whatever the name. */
    for (char *line = strchr(buf, '\n') + 1; *line; line = strchr(line, '\n') + 1)
        if (line[30] != ' ')
            fail_msg("misaligned: %.60s", line);
}

/* A process name holding escape sequences and other bytes reaches no
 * output raw: the table and Prometheus show '?', JSON escapes each byte. */
static void test_comm_escaped(void **s)
{
    (void)s;
    stats_view v;
    sample(&v, "\033]0;x\a\033[2J\x9b\n");
    const stats_view *one = &v;
    for (int k = 0; k < 2; k++) {
        if (k == 0)
            stats_format_table(&one, 1, buf, sizeof(buf));
        else
            stats_format_detail(&v, buf, sizeof(buf));
        for (const unsigned char *c = (const unsigned char *)buf; *c; c++)
            if ((*c < 0x20 && *c != '\n') || *c >= 0x7f)
                fail_msg("format %d passes byte 0x%02x", k, *c);
        /* (the table shows a name's first 10 characters) */
        assert_non_null(strstr(buf, k == 0 ? "?]0;x??[2J" : "?]0;x??[2J??"));
    }
    /* Prometheus: the format's escapes, UTF-8 kept, and U+FFFD for each
     * control character (C1 included) and each byte that is not UTF-8. */
    sample(&v, "\033]0;x\a\033[2J\x9b\n\\\"\xc3\xa9\xc2\x9b\xed\xa0\x80\xc0\xaf\x7f");
    stats_format_prometheus(&one, 1, buf, sizeof(buf));
#define R "\xef\xbf\xbd"
    assert_non_null(strstr(buf, "comm=\"" R "]0;x" R R "[2J" R "\\n\\\\\\\"\xc3\xa9"
                                R R R R R R R R "\""));
    char lab[128]; /* the exporter's node labels (user, group, job...) alike */
    stats_prometheus_label("slurm_job", "a\"\\\n\033\xc3\xa9", lab, sizeof(lab));
    assert_string_equal(lab, "slurm_job=\"a\\\"\\\\\\n" R "\xc3\xa9\"");
#undef R
    for (const unsigned char *c = (const unsigned char *)buf; *c; c++)
        if ((*c < 0x20 && *c != '\n') || *c == 0x7f || (c[0] == 0xc2 && c[1] >= 0x80 &&
                                                       c[1] < 0xa0))
            fail_msg("Prometheus passes byte 0x%02x", *c);
    stats_format_json(&v, buf, sizeof(buf));
    for (const unsigned char *c = (const unsigned char *)buf; *c; c++)
        if ((*c < 0x20 && *c != '\n') || *c >= 0x7f)
            fail_msg("JSON passes byte 0x%02x", *c);
    assert_non_null(strstr(buf, "\\u001b]0;x\\u0007\\u001b[2J\\u009b\\u000a"));
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
    /* A name that says its unit says it once; the version is there. */
    assert_null(strstr(buf, "_bytes_bytes"));
    assert_non_null(strstr(buf, "# TYPE cupool_stitched_bytes_total counter\n"));
    assert_non_null(strstr(buf, "cupool_build_info{version=\"" CUPOOL_VERSION "\"} 1\n"));
    char path[96];
    int fd = mkstemp(scratch_path(path, sizeof(path), "cupool-prom-XXXXXX"));
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, strlen(buf)), (ssize_t)strlen(buf));
    close(fd);
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", path);
    int st = system(cmd);
    unlink(path);
    if (st != 0)
        fail_msg("promtool check metrics failed (make test puts promtool in build/tools: "
                 "scripts/get-promtool)");
}

static char dir[96];

static int page_setup(void **s)
{
    (void)s;
    if (!mkdtemp(scratch_path(dir, sizeof(dir), "cupool-pages-XXXXXX")))
        return -1;
    setenv("CUPOOL_PAGE_DIR", dir, 1);
    return 0;
}

/* Mounts a 64 KiB tmpfs at path: 0, or -1 where mounting is not allowed. */
static int mount_small_tmpfs(const char *path)
{
    return mount("tmpfs", path, "tmpfs", 0, "size=64k,mode=0700");
}

static int page_teardown(void **s)
{
    (void)s;
    umount2(dir, MNT_DETACH); /* test_full_tmpfs_fails_cleanly's */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd);
}

/* The path of pid's page: cupool-<uid>/<pid namespace>-<pid>, or with
 * prefix "." and suffix ".new" the name it is made under. */
static void page_name_as(char *path, size_t len, int pid, const char *prefix,
                         const char *suffix)
{
    struct stat ns;
    assert_int_equal(stat("/proc/self/ns/pid", &ns), 0);
    snprintf(path, len, "%s/cupool-%u/%s%lu-%d%s", dir, (unsigned)geteuid(), prefix,
             (unsigned long)ns.st_ino, pid, suffix);
}

static void page_name(char *path, size_t len, int pid, const char *suffix)
{
    page_name_as(path, len, pid, "", suffix);
}

/* Creates this process's page, in the user's own directory. */
static stats_page *page_create(void)
{
    const char *why = NULL;
    bool passed_over = true;
    stats_page *p = stats_page_create(&why, &passed_over);
    if (!p)
        print_message("no page: %s\n", why);
    assert_false(p && passed_over);
    return p;
}

static void test_page_round_trip(void **s)
{
    (void)s;
    stats_page *p = page_create();
    assert_non_null(p);
    char path[256];
    page_name(path, sizeof(path), (int)getpid(), "");
    assert_string_equal(stats_page_path(p), path);
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
    /* cupool pause's mark, whatever the process publishes. */
    assert_int_equal(stats_page_mark_paused((int)getpid(), 123, 456), 0);
    stats_page_publish(p, &v);
    assert_int_equal(stats_page_read((int)getpid(), &r), 0);
    assert_int_equal(r.proc.paused_since, 123);
    assert_int_equal(r.proc.paused_needs, 456);
    assert_int_equal(stats_page_mark_paused((int)getpid(), 0, 0), 0);
    assert_int_equal(stats_page_read((int)getpid(), &r), 0);
    assert_int_equal(r.proc.paused_since, 0);
    int pids[8];
    assert_int_equal(stats_page_list(pids, 8, true, NULL), 1);
    assert_int_equal(pids[0], getpid());
    stats_page_remove(p);
    assert_int_equal(stats_page_read((int)getpid(), &r), -ENOENT);
}

/* A reader's request reaches the writer, whose answer reaches the reader;
 * requests that come before an answer are served by it together. */
static void test_page_requests(void **s)
{
    (void)s;
    stats_page *p = page_create();
    assert_non_null(p);
    stats_view v;
    sample(&v, "self");
    stats_page_publish(p, &v);
    int me = (int)getpid();
    assert_int_equal(stats_page_pending(p, STATS_REQ_FLUSH), 0);
    uint64_t t1, t2, t3;
    assert_int_equal(stats_page_ask(me, STATS_REQ_FLUSH, &t1), 0);
    assert_int_equal(stats_page_ask(me, STATS_REQ_FLUSH, &t2), 0);
    assert_int_equal(stats_page_ask(me, STATS_REQ_DUMP, &t3), 0);
    assert_int_equal(t2, t1 + 1);
    assert_int_equal(stats_page_answered(me, STATS_REQ_FLUSH, t1), 0);
    assert_int_equal(stats_page_pending(p, STATS_REQ_FLUSH), t2);
    stats_page_answer(p, STATS_REQ_FLUSH, t2);
    assert_int_equal(stats_page_pending(p, STATS_REQ_FLUSH), 0);
    assert_int_equal(stats_page_answered(me, STATS_REQ_FLUSH, t1), 1);
    assert_int_equal(stats_page_answered(me, STATS_REQ_FLUSH, t2), 1);
    assert_int_equal(stats_page_answered(me, STATS_REQ_DUMP, t3), 0);
    assert_int_equal(stats_page_pending(p, STATS_REQ_DUMP), t3);
    stats_page_remove(p);
}

static void test_stale_page_is_cleaned(void **s)
{
    (void)s;
    pid_t child = fork();
    if (child == 0) {
        stats_page *p = page_create(); /* and exits without removing */
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

/* The same pid after exec runs another image, which does not map the page:
 * stale, though the process lives with the same start time. */
static void test_exec_makes_page_stale(void **s)
{
    (void)s;
    int go[2];
    assert_int_equal(pipe(go), 0);
    pid_t child = fork();
    if (child == 0) {
        stats_page *p = page_create();
        stats_view v;
        sample(&v, "child");
        if (p)
            stats_page_publish(p, &v);
        char c;
        close(go[1]);
        if (read(go[0], &c, 1) != 1) /* the parent has read it live */
            _exit(1);
        execl("/bin/sleep", "sleep", "5", (char *)NULL);
        _exit(127);
    }
    close(go[0]);
    stats_view r;
    for (int i = 0; i < 200 && stats_page_read(child, &r) != 0; i++)
        usleep(10000);
    assert_int_equal(stats_page_read(child, &r), 0);
    assert_int_equal(write(go[1], "x", 1), 1);
    close(go[1]);
    int err = 0;
    for (int i = 0; i < 200 && (err = stats_page_read(child, &r)) == 0; i++)
        usleep(10000);
    assert_int_equal(err, -ESRCH);
    assert_int_equal(kill(child, 0), 0); /* sleep is running */
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}

/* Writes a file of len bytes of garbage at path with the given mode. */
static void plant(const char *path, size_t len, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    assert_true(fd >= 0);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(write(fd, "g", 1), 1);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void test_foreign_file_is_not_a_page(void **s)
{
    (void)s;
    char path[256];
    stats_page_remove(page_create()); /* makes the user's directory */
    page_name(path, sizeof(path), (int)getpid(), "");
    plant(path, 4096 * 8, 0600);
    stats_view r;
    assert_int_equal(stats_page_read((int)getpid(), &r), -EPERM); /* wrong size */
    unlink(path);
    stats_page *p = page_create();
    assert_non_null(p);
    stats_view v;
    sample(&v, "self");
    stats_page_publish(p, &v);
    /* The same page with another mode, or another link to it: refused. */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(stats_page_read((int)getpid(), &r), -EPERM);
    assert_int_equal(chmod(path, 0600), 0);
    char other[300];
    snprintf(other, sizeof(other), "%s.link", path);
    assert_int_equal(link(path, other), 0);
    assert_int_equal(stats_page_read((int)getpid(), &r), -EPERM);
    unlink(other);
    assert_int_equal(stats_page_read((int)getpid(), &r), 0);
    stats_page_remove(p);
}

/* Files planted at the name a process will use (a hard link to one of
 * the user's own files, a FIFO, a file of another user: in the user's own
 * directory only root can plant them) neither keep it from its page nor
 * get written: the page is made under another name and renamed over
 * them. Readers ignore them without blocking. */
static void test_planted_names(void **s)
{
    (void)s;
    char path[256], victim[256];
    stats_page_remove(page_create()); /* makes the user's directory */
    page_name(path, sizeof(path), (int)getpid(), "");
    snprintf(victim, sizeof(victim), "%s/victim", dir);
    plant(victim, 100, 0600);
    assert_int_equal(link(victim, path), 0);
    stats_page *p = page_create();
    assert_non_null(p);
    assert_string_equal(stats_page_path(p), path);
    struct stat st;
    assert_int_equal(stat(victim, &st), 0);
    assert_int_equal(st.st_size, 100); /* untouched */
    assert_int_equal(st.st_nlink, 1);  /* the name is the page's now */
    stats_view v, r;
    sample(&v, "self");
    stats_page_publish(p, &v);
    assert_int_equal(stats_page_read((int)getpid(), &r), 0);
    stats_page_remove(p);
    unlink(victim);
    assert_int_equal(mkfifo(path, 0600), 0);
    alarm(10); /* a reader that blocks on the FIFO fails here */
    assert_int_equal(stats_page_read((int)getpid(), &r), -EPERM);
    int pids[4];
    assert_int_equal(stats_page_list(pids, 4, true, NULL), 0);
    alarm(0);
    unlink(path);
    if (geteuid() != 0)
        return; /* only root can make a file of another user here */
    p = page_create();
    assert_non_null(p);
    stats_page_publish(p, &v);
    assert_int_equal(chown(path, 65534, 65534), 0);
    assert_int_equal(stats_page_read((int)getpid(), &r), -EPERM);
    assert_int_equal(stats_page_list(pids, 4, true, NULL), 0);
    assert_int_equal(access(path, F_OK), 0); /* not removed either */
    stats_page_remove(p);
}

/* Another user made the directory the user's pages go in (here: a
 * directory others may enter, or, as root, one of another user): the page
 * goes to a private directory, which readers find, and which goes with
 * the page. Squatting every name a process could use is no longer
 * possible. */
static void test_squatted_directory_passed_over(void **s)
{
    (void)s;
    char squat[128];
    snprintf(squat, sizeof(squat), "%s/cupool-%u", dir, (unsigned)geteuid());
    assert_int_equal(mkdir(squat, 0777), 0);
    assert_int_equal(chmod(squat, 0777), 0);
    if (geteuid() == 0)
        assert_int_equal(chown(squat, 65534, 65534), 0);
    const char *why = NULL;
    bool passed_over = false;
    stats_page *p = stats_page_create(&why, &passed_over);
    assert_non_null(p);
    assert_true(passed_over);
    char inside[160];
    snprintf(inside, sizeof(inside), "%s/", squat);
    assert_null(strstr(stats_page_path(p), inside));
    stats_view v, r;
    sample(&v, "self");
    stats_page_publish(p, &v);
    assert_int_equal(stats_page_read((int)getpid(), &r), 0);
    int pids[4];
    assert_int_equal(stats_page_list(pids, 4, true, NULL), 1);
    char priv[512];
    snprintf(priv, sizeof(priv), "%s", stats_page_path(p));
    *strrchr(priv, '/') = '\0';
    stats_page_remove(p);
    assert_int_equal(access(priv, F_OK), -1); /* the private directory went too */
    rmdir(squat);
}

/* A page directory others could rename pages in (writable, not sticky;
 * or, as root, another user's) is refused with the reason. */
static void test_unsafe_base_refused(void **s)
{
    (void)s;
    assert_int_equal(chmod(dir, 0777), 0);
    const char *why = NULL;
    bool passed_over;
    assert_null(stats_page_create(&why, &passed_over));
    assert_non_null(strstr(why, "sticky"));
    assert_int_equal(chmod(dir, 01777), 0);
    stats_page_remove(page_create());
    if (geteuid() != 0)
        return;
    assert_int_equal(chown(dir, 65534, 65534), 0);
    assert_int_equal(chmod(dir, 0700), 0);
    assert_null(stats_page_create(&why, &passed_over));
    assert_non_null(strstr(why, "another user"));
}

/* A page on a full tmpfs (another user filled /dev/shm) fails at creation,
 * and the process goes on; without its memory reserved there, the first
 * write to the page killed the process with SIGBUS. Root only (it mounts a
 * small tmpfs). */
static void test_full_tmpfs_fails_cleanly(void **s)
{
    (void)s;
    if (geteuid() != 0 || mount_small_tmpfs(dir) != 0)
        skip_because(SKIP_NOT_ROOT);
    char fill[128];
    snprintf(fill, sizeof(fill), "%s/fill", dir);
    int fd = open(fill, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    static char block[4096];
    while (write(fd, block, sizeof(block)) > 0)
        ;
    close(fd);
    const char *why = NULL;
    bool passed_over;
    stats_page *p = stats_page_create(&why, &passed_over);
    assert_null(p);
    assert_non_null(strstr(why, "space"));
    char left[160];
    snprintf(left, sizeof(left), "test -z \"$(ls -A %s/cupool-%u)\"", dir,
             (unsigned)geteuid());
    assert_int_equal(system(left), 0); /* nothing half made is left */
}

/* A page left half made by a process that died while making it is
 * removed by the next cleaning reader. */
static void test_half_made_page_cleaned(void **s)
{
    (void)s;
    stats_page_remove(page_create()); /* makes the user's directory */
    pid_t child = fork();
    if (child == 0)
        _exit(0);
    assert_int_equal(waitpid(child, NULL, 0), child);
    char tmp[256];
    page_name_as(tmp, sizeof(tmp), child, ".", ".new");
    plant(tmp, 100, 0600);
    int pids[4];
    size_t removed = 0;
    assert_int_equal(stats_page_list(pids, 4, true, &removed), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(access(tmp, F_OK), -1);
}

/* A page of another pid namespace (same pid number) is neither read,
 * listed nor removed. */
static void test_other_namespace_left_alone(void **s)
{
    (void)s;
    stats_page *p = page_create();
    assert_non_null(p);
    char other[256];
    snprintf(other, sizeof(other), "%s/cupool-%u/1-%d", dir, (unsigned)geteuid(),
             (int)getpid());
    assert_int_equal(link(stats_page_path(p), other), 0);
    assert_int_equal(unlink(stats_page_path(p)), 0); /* still mapped by us */
    stats_view r;
    assert_int_equal(stats_page_read((int)getpid(), &r), -ENOENT);
    int pids[4];
    size_t removed = 0;
    assert_int_equal(stats_page_list(pids, 4, true, &removed), 0);
    assert_int_equal(removed, 0);
    assert_int_equal(access(other, F_OK), 0);
    unlink(other);
    stats_page_forget(p);
}

/* A live page cut short (its header kept) and grown again, over and over,
 * while it is read: the reader never dies of SIGBUS (it reads with pread;
 * it maps nothing). */
static atomic_int truncating;
static off_t page_size;
static void *truncate_loop(void *arg)
{
    while (atomic_load(&truncating)) {
        truncate(arg, 256);
        truncate(arg, page_size);
    }
    return NULL;
}

static void test_truncated_while_read(void **s)
{
    (void)s;
    stats_page *p = page_create();
    assert_non_null(p);
    stats_view v;
    sample(&v, "self");
    stats_page_publish(p, &v); /* not touched again while cut short */
    char path[300];
    snprintf(path, sizeof(path), "%s", stats_page_path(p));
    struct stat st0;
    assert_int_equal(stat(path, &st0), 0);
    page_size = st0.st_size;
    pid_t child = fork();
    if (child == 0) {
        atomic_store(&truncating, 1);
        pthread_t t;
        pthread_create(&t, NULL, truncate_loop, path);
        stats_view r;
        int read_ok = 0;
        for (int i = 0; i < 3000; i++)
            read_ok += stats_page_read((int)getppid(), &r) == 0;
        atomic_store(&truncating, 0);
        pthread_join(t, NULL);
        printf("reads that got a whole view: %d of 3000\n", read_ok);
        fflush(stdout);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    stats_page_remove(p);
}

/* safefile_open walks the whole path (fs.protected_symlinks may be off,
 * and guards sticky directories only): a link on the way is followed
 * only if it is the user's or root's, in a directory no other user can
 * change, and its target is walked the same way. Relative paths, "." and
 * ".." and a link of the user's in a sticky directory work; a loop of
 * links ends. Nothing is made where a link was refused. */
static void test_safefile_link_on_path(void **s)
{
    (void)s;
    char mine[128], open_dir[128], p[256], l[256];
    const char *why = NULL;
    snprintf(mine, sizeof(mine), "%s/mine", dir);
    assert_int_equal(mkdir(mine, 0700), 0);
    snprintf(l, sizeof(l), "%s/ok", dir);
    assert_int_equal(symlink("mine", l), 0); /* the user's, in its own directory */
    snprintf(p, sizeof(p), "%s/ok/../ok/./a", dir);
    int fd = safefile_open(p, O_WRONLY | O_CREAT, &why);
    assert_true(fd >= 0);
    close(fd);
    snprintf(p, sizeof(p), "%s/a", mine);
    assert_int_equal(access(p, F_OK), 0);
    snprintf(open_dir, sizeof(open_dir), "%s/open", dir);
    assert_int_equal(mkdir(open_dir, 0777), 0);
    assert_int_equal(chmod(open_dir, 0777), 0); /* others may swap the link */
    snprintf(l, sizeof(l), "%s/to", open_dir);
    assert_int_equal(symlink(mine, l), 0);
    snprintf(p, sizeof(p), "%s/to/b", open_dir);
    assert_int_equal(safefile_open(p, O_WRONLY | O_CREAT, &why), -1);
    assert_non_null(strstr(why, "a symbolic link on its path is in a directory another user "
                                "may change"));
    assert_non_null(safefile_path_refusal(p));
    assert_int_equal(safefile_dir_open(l, &why), -EPERM);
    snprintf(l, sizeof(l), "%s/b", mine);
    assert_int_equal(access(l, F_OK), -1);
    assert_int_equal(chmod(open_dir, 01777), 0); /* sticky: only the user can */
    fd = safefile_open(p, O_WRONLY | O_CREAT, &why);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(access(l, F_OK), 0);
    assert_null(safefile_path_refusal(p));
    snprintf(l, sizeof(l), "%s/loop", dir);
    assert_int_equal(symlink("loop", l), 0);
    snprintf(p, sizeof(p), "%s/loop/c", dir);
    assert_int_equal(safefile_open(p, O_WRONLY | O_CREAT, &why), -1);
    assert_string_equal(why, strerror(ELOOP));
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(dir), 0);
    fd = safefile_open("ok/d", O_WRONLY | O_CREAT, &why);
    assert_int_equal(chdir(cwd), 0);
    assert_true(fd >= 0);
    close(fd);
    if (geteuid() != 0)
        return; /* only root can make a link of another user */
    snprintf(l, sizeof(l), "%s/theirs", dir);
    assert_int_equal(symlink(mine, l), 0);
    assert_int_equal(lchown(l, 65534, 65534), 0);
    snprintf(p, sizeof(p), "%s/theirs/e", dir);
    assert_int_equal(safefile_open(p, O_WRONLY | O_CREAT, &why), -1);
    assert_non_null(strstr(why, "a symbolic link on its path belongs to another user"));
    snprintf(l, sizeof(l), "%s/e", mine);
    assert_int_equal(access(l, F_OK), -1);
}

/* The user's page directory squatted by another user (as root: a
 * directory of uid 65534, open to all): a group meets in
 * $XDG_RUNTIME_DIR/cupool and says why; a reader finds it there, and so
 * does every member still once the squat is gone (the first place that
 * holds a group is where all meet: they never split). */
static void test_group_squatted_meets_elsewhere(void **s)
{
    (void)s;
    char squat[128], run[128], want[160];
    snprintf(squat, sizeof(squat), "%s/cupool-%u", dir, (unsigned)geteuid());
    assert_int_equal(mkdir(squat, 0777), 0);
    assert_int_equal(chmod(squat, 0777), 0);
    if (geteuid() == 0)
        assert_int_equal(chown(squat, 65534, 65534), 0);
    snprintf(run, sizeof(run), "%s/run", dir);
    assert_int_equal(mkdir(run, 0700), 0);
    setenv("XDG_RUNTIME_DIR", run, 1);
    /* The fallback beside it ($HOME/.cache/cupool) is the test's own too:
     * a group "sq" left in the user's by an earlier run is not this one. */
    char home[128], *old_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
    snprintf(home, sizeof(home), "%s/home", dir);
    assert_int_equal(mkdir(home, 0700), 0);
    setenv("HOME", home, 1);
    group_cap caps[STATS_MAX_DEVICES];
    for (int i = 0; i < STATS_MAX_DEVICES; i++)
        caps[i] = (group_cap){8 << 20, 0, 0};
    const char *why = NULL, *passed = NULL;
    group *g = group_join("sq", caps, &why);
    if (!g)
        fail_msg("cannot join: %s", why);
    snprintf(want, sizeof(want), "%s/cupool", run);
    assert_string_equal(group_where(g, &passed), want);
    assert_non_null(passed);
    assert_non_null(strstr(passed, "another user"));
    static group_view v;
    assert_int_equal(group_read("sq", &v), 0);
    assert_int_equal(v.nmembers, 1);
    assert_int_equal(rmdir(squat), 0); /* root removed the squat */
    group *again = group_join("sq", caps, &why);
    assert_non_null(again);
    assert_string_equal(group_where(again, &passed), want);
    assert_null(passed);
    assert_int_equal(group_read("sq", &v), 0);
    assert_int_equal(v.nmembers, 1); /* this process, joined again */
    group_leave(again);
    group_forget(g);
    group_forget(again);
    unsetenv("XDG_RUNTIME_DIR");
    if (old_home)
        setenv("HOME", old_home, 1);
    free(old_home);
}

/* ---- whose a process is (node/userns.c) -------------------------------------- */

/* uid_map text as the kernel prints it: the initial namespace's, unshare
 * -Ur's (root inside is the user outside), several ranges; an id in no
 * range is unmapped; what the kernel never takes is refused. */
static void test_userns_map_parse(void **s)
{
    (void)s;
    static userns_map m;
    assert_int_equal(userns_map_parse("         0          0 4294967295\n", &m), 0);
    assert_true(userns_map_is_initial(&m));
    assert_int_equal(userns_map_outside(&m, 1000), 1000);
    assert_int_equal(userns_map_parse("         0       1000          1\n", &m), 0);
    assert_false(userns_map_is_initial(&m));
    assert_int_equal(userns_map_outside(&m, 0), 1000);
    assert_int_equal(userns_map_outside(&m, 1), -1);
    assert_int_equal(userns_map_outside(&m, 65534), -1);
    assert_int_equal(userns_map_parse("0 1000 1\n1\t100000 65536", &m), 0);
    assert_int_equal(m.n, 2);
    assert_int_equal(userns_map_outside(&m, 1), 100000);
    assert_int_equal(userns_map_outside(&m, 65536), 165535);
    assert_int_equal(userns_map_outside(&m, 65537), -1);
    assert_int_equal(userns_map_parse("", &m), 0); /* not written yet: maps nothing */
    assert_int_equal(userns_map_outside(&m, 0), -1);
    assert_false(userns_map_is_initial(&m));
    static const char *const bad[] = {"0 1000\n", "0 1000 0\n", "0 1000 1 5\n", "x 0 1\n",
                                      "-1 0 1\n", "+0 0 1\n", "0 0 4294967296\n",
                                      "1 0 4294967295\n", "0 4294967295 1\n", "\n",
                                      "0 0 1\n\n", "0 0 99999999999999999999\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (userns_map_parse(bad[i], &m) != -EINVAL)
            fail_msg("uid_map '%s' was taken", bad[i]);
    static char many[(USERNS_MAP_RANGES + 1) * 16];
    size_t at = 0;
    for (int i = 0; i < USERNS_MAP_RANGES; i++)
        at += (size_t)snprintf(many + at, sizeof(many) - at, "%d %d 1\n", i, i);
    assert_int_equal(userns_map_parse(many, &m), 0);
    assert_int_equal(m.n, USERNS_MAP_RANGES);
    snprintf(many + at, sizeof(many) - at, "%d %d 1\n", USERNS_MAP_RANGES, USERNS_MAP_RANGES);
    assert_int_equal(userns_map_parse(many, &m), -EINVAL);
}

/* A child that sleeps as uid (as root can make one), or -1. */
static pid_t userns_sleeper(uid_t uid)
{
    pid_t c = fork();
    if (c == 0) {
        if (setgid(uid) || setuid(uid))
            _exit(1);
        pause();
        _exit(0);
    }
    for (int i = 0; i < 500 && c > 0; i++) { /* until its uid is the one asked */
        uint32_t owner;
        if (userns_process_whose(c, &owner) != USERNS_MINE)
            break;
        usleep(1000);
    }
    return c;
}

/* In a user namespace of its own, where the caller is inside (unshare
 * -Ur: 0), the caller is not root, its parent (its own user's) is its,
 * and a process of a user the namespace does not map is not: not even
 * where the caller is the overflow uid inside (65534), which every
 * unmapped id reads as. Exit status: 0, 77 where no user namespace may be
 * made, else the check that failed. */
static int userns_child_checks(pid_t other, unsigned inside)
{
    char map[64];
    snprintf(map, sizeof(map), "%u %u 1\n", inside, (unsigned)geteuid());
    if (unshare(CLONE_NEWUSER))
        return 77;
    int fd = open("/proc/self/uid_map", O_WRONLY);
    if (fd < 0 || write(fd, map, strlen(map)) != (ssize_t)strlen(map))
        return 77;
    close(fd);
    uint32_t owner;
    if (userns_caller_is_root())
        return 1;
    if (inside != 65534 && userns_process_whose(getppid(), &owner) != USERNS_MINE)
        return 2;
    if (other > 0 && userns_process_whose(other, &owner) != USERNS_UNMAPPED)
        return 3;
    return 0;
}

/* Whose a process is: the caller's own, one that ended, another user's
 * (as root, who is root here); and inside a user namespace of its own,
 * as userns_child_checks says. */
static void test_userns_process_whose(void **s)
{
    (void)s;
    uint32_t owner = 0;
    assert_int_equal(userns_process_whose(getpid(), &owner), USERNS_MINE);
    pid_t gone = fork();
    if (gone == 0)
        _exit(0);
    assert_int_equal(waitpid(gone, NULL, 0), gone);
    assert_int_equal(userns_process_whose(gone, &owner), USERNS_GONE);
    pid_t other = geteuid() == 0 ? userns_sleeper(65534) : -1;
    if (other > 0) {
        assert_true(userns_caller_is_root());
        assert_int_equal(userns_process_whose(other, &owner), USERNS_OTHERS);
        assert_int_equal(owner, 65534);
    }
    int st[2];
    for (int k = 0; k < 2; k++) {
        pid_t c = fork();
        if (c == 0)
            _exit(userns_child_checks(other, k ? 65534 : 0));
        assert_int_equal(waitpid(c, &st[k], 0), c);
    }
    if (other > 0) {
        kill(other, SIGKILL);
        waitpid(other, NULL, 0);
    }
    if (WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 77)
        skip_because("no user namespace may be made here (unshare -U)");
    for (int k = 0; k < 2; k++)
        if (!WIFEXITED(st[k]) || WEXITSTATUS(st[k]))
            fail_msg("inside as %d: status %#x", k ? 65534 : 0, st[k]);
}

static void *sleeps_on(void *arg) /* (ends its process within 60 s, should the test fail) */
{
    (void)arg;
    sleep(60);
    _exit(0);
}

/* Whether pid's /proc stat says Z (its main thread ended). */
static bool stat_says_zombie(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(line, 1, sizeof(line) - 1, f);
    fclose(f);
    line[n] = '\0';
    const char *p = strrchr(line, ')');
    return p && p[1] == ' ' && p[2] == 'Z';
}

/* A zombie (exited, its status not yet collected) is gone: it holds no
 * memory, and a group member that left holding memory is reaped by it
 * (the group's racers once waited for a zombie racer's cache). A process
 * whose main thread alone ended (its /proc state Z) still runs. */
static void test_zombie_is_gone(void **s)
{
    (void)s;
    pid_t half = fork();
    assert_true(half >= 0);
    if (half == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, sleeps_on, NULL) == 0)
            pthread_exit(NULL);
        _exit(1);
    }
    for (int i = 0; i < 6000 && !stat_says_zombie(half); i++)
        usleep(10000);
    assert_true(stat_says_zombie(half));
    assert_true(stats_start_time((int)half) != 0);
    kill(half, SIGKILL);
    assert_int_equal(waitpid(half, NULL, 0), half);
    assert_true(stats_start_time((int)getpid()) != 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(0);
    siginfo_t si;
    /* Exited, and left unreaped (WNOWAIT). */
    assert_int_equal(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT), 0);
    assert_int_equal(stats_start_time((int)child), 0);
    assert_int_equal(waitpid(child, NULL, 0), child);
}

/* Steps a forked member through its turn: it reads a step (a byte) from
 * go and answers on done. */
static void turn_member(int go, int done, group_cap *caps)
{
    const char *why = NULL;
    group *g = group_join("tq", caps, &why);
    char step = 0;
    while (g && read(go, &step, 1) == 1 && step != 'q') {
        if (step == 'b')
            group_wait_begin(g, 0, 6 << 20);
        else if (step == 't')
            group_wait_taking(g);
        else if (step == 'e')
            group_wait_end(g);
        if (write(done, &step, 1) != 1)
            break;
    }
    _exit(g ? 0 : 1);
}

static void turn_step(int go, int done, char step)
{
    char got = 0;
    assert_int_equal(write(go, &step, 1), 1);
    assert_int_equal(read(done, &got, 1), 1);
    assert_int_equal(got, step);
}

/* A member whose turn came keeps its place while it takes the memory
 * (group_wait_taking): the next waiter is not first until the first's
 * take ends, and is not stuck meanwhile (the taker goes on); a wait begun
 * again while taking keeps the place. Without the place kept (its wait
 * ended before its take), the next waiter took the room first: turns
 * once came out of order on a loaded machine (test_group_turn_fifo). */
static void test_group_turn_held_while_taking(void **s)
{
    (void)s;
    group_cap caps[STATS_MAX_DEVICES];
    for (int i = 0; i < STATS_MAX_DEVICES; i++)
        caps[i] = (group_cap){8 << 20, 0, 0};
    int go[2], done[2];
    assert_int_equal(pipe(go), 0);
    assert_int_equal(pipe(done), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(go[1]);
        close(done[0]);
        turn_member(go[0], done[1], caps);
    }
    close(go[0]);
    close(done[1]);
    const char *why = NULL;
    group *me = group_join("tq", caps, &why);
    if (!me)
        fail_msg("cannot join: %s", why);
    turn_step(go[1], done[0], 'b'); /* the other member waits first */
    group_wait_begin(me, 0, 6 << 20);
    assert_false(group_wait_first(me, 0));
    /* It only waits, for more than the budget leaves: nobody would free;
     * under a budget its request fits, it is about to take its turn. */
    assert_true(group_wait_stuck(me, 0, 4 << 20));
    assert_false(group_wait_stuck(me, 0, 8 << 20));
    turn_step(go[1], done[0], 't'); /* its turn came: it takes */
    assert_false(group_wait_first(me, 0));
    assert_false(group_wait_stuck(me, 0, 4 << 20));
    static group_view v;
    assert_int_equal(group_read("tq", &v), 0);
    int taking = 0;
    for (uint32_t i = 0; i < v.nmembers; i++)
        taking += v.members[i].pid == child && v.members[i].wait_taking;
    assert_int_equal(taking, 1);
    turn_step(go[1], done[0], 'b'); /* its take fell short: it waits again, first */
    assert_false(group_wait_first(me, 0));
    turn_step(go[1], done[0], 't');
    turn_step(go[1], done[0], 'e'); /* its take done */
    assert_true(group_wait_first(me, 0));
    assert_false(group_wait_stuck(me, 0, 4 << 20));
    group_wait_end(me);
    char q = 'q';
    assert_int_equal(write(go[1], &q, 1), 1);
    int st = 0;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    close(go[1]);
    close(done[0]);
    group_leave(me);
    group_forget(me);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fragmentation),
        cmocka_unit_test(test_userns_map_parse),
        cmocka_unit_test(test_userns_process_whose),
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_paused),
        cmocka_unit_test(test_truncation_reports_needed_length),
        cmocka_unit_test(test_every_field_in_every_format),
        cmocka_unit_test(test_json_parses),
        cmocka_unit_test(test_prometheus_passes_promtool),
        cmocka_unit_test(test_comm_escaped),
        cmocka_unit_test(test_detail_unknown_and_aligned),
        cmocka_unit_test_setup_teardown(test_page_round_trip, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_stale_page_is_cleaned, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_foreign_file_is_not_a_page, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_page_requests, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_exec_makes_page_stale, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_planted_names, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_squatted_directory_passed_over, page_setup,
                                        page_teardown),
        cmocka_unit_test_setup_teardown(test_unsafe_base_refused, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_full_tmpfs_fails_cleanly, page_setup,
                                        page_teardown),
        cmocka_unit_test_setup_teardown(test_half_made_page_cleaned, page_setup,
                                        page_teardown),
        cmocka_unit_test_setup_teardown(test_other_namespace_left_alone, page_setup,
                                        page_teardown),
        cmocka_unit_test_setup_teardown(test_truncated_while_read, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_safefile_link_on_path, page_setup, page_teardown),
        cmocka_unit_test_setup_teardown(test_group_squatted_meets_elsewhere, page_setup,
                                        page_teardown),
        cmocka_unit_test_setup_teardown(test_group_turn_held_while_taking, page_setup,
                                        page_teardown),
        cmocka_unit_test(test_zombie_is_gone),
    };
    return cmocka_run_group_tests_name("stats", tests, NULL, NULL);
}
