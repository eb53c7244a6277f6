/*
 * page.c - the live page: one small shared-memory file per process.
 *
 * The shim's helper thread is the only writer; it publishes a whole
 * stats_view under a seqlock (odd while writing). Readers in other
 * processes copy the view and retry while the sequence is odd or moved, so
 * the allocation path never takes a lock or touches the page. The page
 * records the process's start time, so a page whose pid was reused by an
 * unrelated process is recognised as stale.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "stats.h"

#define PAGE_MAGIC 0x3145474150504f43ull /* "COPPAGE1" */
enum { PAGE_VERSION = 1 };

typedef struct page_data {
    uint64_t magic;
    uint32_t version, size;
    int32_t pid;
    uint32_t uid;
    uint64_t start_time;       /* /proc/PID/stat field 22 */
    _Atomic uint64_t seq;      /* odd while the writer writes */
    stats_view view;
} page_data;

struct stats_page {
    page_data *d;
    char path[512];
};

const char *stats_page_dir(void)
{
    const char *d = getenv("CUPOOL_PAGE_DIR");
    if (d && *d)
        return d;
    struct stat st;
    return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
}

static void page_path(char *buf, size_t len, int pid)
{
    snprintf(buf, len, "%s/cupool-%u-%d", stats_page_dir(), (unsigned)getuid(), pid);
}

/* Start time of pid in clock ticks since boot, or 0 if unknown. */
static uint64_t start_time(int pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* comm may hold spaces and parentheses */
    if (!p)
        return 0;
    /* After ") " come fields 3, 4, ...; start time is field 22. */
    unsigned long long v = 0;
    p += 2;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (p)
        v = strtoull(p, NULL, 10);
    return v;
}

stats_page *stats_page_create(void)
{
    stats_page *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    page_path(p->path, sizeof(p->path), (int)getpid());
    int fd = open(p->path, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, 0600) || ftruncate(fd, sizeof(page_data))) {
        int e = errno;
        if (fd >= 0)
            close(fd), unlink(p->path);
        free(p);
        errno = e;
        return NULL;
    }
    p->d = mmap(NULL, sizeof(page_data), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p->d == MAP_FAILED) {
        int e = errno;
        unlink(p->path);
        free(p);
        errno = e;
        return NULL;
    }
    p->d->version = PAGE_VERSION;
    p->d->size = sizeof(page_data);
    p->d->pid = (int32_t)getpid();
    p->d->uid = (uint32_t)getuid();
    p->d->start_time = start_time((int)getpid());
    atomic_thread_fence(memory_order_release);
    p->d->magic = PAGE_MAGIC; /* last: a reader trusts nothing before it */
    return p;
}

void stats_page_publish(stats_page *p, const stats_view *v)
{
    uint64_t s = atomic_load_explicit(&p->d->seq, memory_order_relaxed);
    atomic_store_explicit(&p->d->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    size_t n = offsetof(stats_view, dev) + v->ndevices * sizeof(v->dev[0]);
    memcpy(&p->d->view, v, n);
    atomic_store_explicit(&p->d->seq, s + 2, memory_order_release);
}

void stats_page_remove(stats_page *p)
{
    if (!p)
        return;
    munmap(p->d, sizeof(page_data));
    unlink(p->path);
    free(p);
}

static bool alive(int pid, uint64_t started)
{
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return false;
    uint64_t now = start_time(pid);
    return !started || !now || now == started;
}

int stats_page_read(int pid, stats_view *v)
{
    char path[512];
    page_path(path, sizeof(path), pid);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -ENOENT;
    struct stat st;
    if (fstat(fd, &st) || (size_t)st.st_size < sizeof(page_data)) {
        close(fd);
        return -EPROTO;
    }
    const page_data *d = mmap(NULL, sizeof(page_data), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (d == MAP_FAILED)
        return -EPROTO;
    int err = -EAGAIN;
    if (d->magic != PAGE_MAGIC || d->version != PAGE_VERSION ||
        d->size != sizeof(page_data) || d->pid != pid) {
        err = -EPROTO;
    } else if (!alive(pid, d->start_time)) {
        err = -ESRCH;
    } else {
        for (int tries = 0; tries < 1000 && err; tries++) {
            uint64_t s1 = atomic_load_explicit(&d->seq, memory_order_acquire);
            if (s1 & 1)
                continue;
            memcpy(v, &d->view, sizeof(*v));
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&d->seq, memory_order_relaxed) == s1)
                err = 0;
        }
        if (!err && v->ndevices > STATS_MAX_DEVICES)
            err = -EPROTO;
    }
    munmap((void *)d, sizeof(page_data));
    return err;
}

size_t stats_page_list(int *pids, size_t max, bool clean, size_t *removed)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "cupool-%u-", (unsigned)getuid());
    size_t n = 0, gone = 0;
    DIR *dir = opendir(stats_page_dir());
    for (struct dirent *e; dir && (e = readdir(dir));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)))
            continue;
        char *end;
        long pid = strtol(e->d_name + strlen(prefix), &end, 10);
        if (*end || pid <= 0)
            continue;
        stats_view v;
        int err = stats_page_read((int)pid, &v);
        if (err == -ESRCH) {
            if (clean) {
                char path[512];
                page_path(path, sizeof(path), (int)pid);
                gone += unlink(path) == 0;
            }
            continue;
        }
        if (n < max)
            pids[n++] = (int)pid;
    }
    if (dir)
        closedir(dir);
    if (removed)
        *removed = gone;
    return n;
}
