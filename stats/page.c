/* SPDX-License-Identifier: Apache-2.0 */
/*
 * page.c - the live page: one small shared-memory file per process.
 *
 * The shim's helper thread is the only writer of the statistics; it
 * publishes a whole stats_view under a seqlock (odd while writing). Readers
 * in other processes copy the view with pread and retry while the sequence
 * is odd or moved, so the allocation path never takes a lock or touches the
 * page, and a reader never maps a file that could shrink under it.
 *
 * The page is also the control channel: `cupool flush` and `cupool dump`
 * raise a request counter in it; the helper, which looks at the page every
 * time it publishes, serves the request and raises the matching answer
 * counter. No signal is sent.
 *
 * Nothing on a page is trusted, and no other user can keep a process from
 * its page. Pages live in a directory of their user's own,
 * <base>/cupool-<uid> (mode 0700; base is $CUPOOL_PAGE_DIR, /dev/shm or
 * /tmp, owned by root or the user, sticky if others may write in it), so
 * no other user can create, squat or link names in it; a directory of that
 * name that is not the user's own (planted by another user) is passed
 * over for a private one, cupool-<uid>.XXXXXX, which readers look for only
 * then. In it the page is <pid namespace>-<pid> (the namespace keeps
 * containers that share /dev/shm apart). The writer builds the page under
 * a temporary name, its memory reserved with posix_fallocate (a full tmpfs
 * fails the page at creation instead of killing the program with SIGBUS
 * when it first touches it), and renames it into place once its header is
 * whole. A reader opens it without following links or blocking and
 * accepts it only if it is a regular file owned by the process's user,
 * mode 0600, with one link, of the exact size, with the right header; and
 * only as long as the process named in it maps that very file (its device
 * and inode in /proc/PID/maps), which proves the page belongs to the
 * process image running now: a page left behind by exec, or by a process
 * whose pid was reused, is stale.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "page_internal.h"
#include "safefile.h"
#include "stats.h"

struct stats_page {
    page_data *d;
    bool own_dir;              /* a private directory, removed with the page */
    char dir[400];
    char path[512];
};

const char *stats_page_dir(void)
{
    const char *d = secure_getenv("CUPOOL_PAGE_DIR");
    if (d && *d)
        return d;
    struct stat st;
    return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
}

/* The inode of this process's pid namespace, 0 if /proc cannot tell. */
unsigned long stats_pid_ns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* Start time of pid in clock ticks since boot, or 0 if unknown. */
uint64_t stats_start_time(int pid)
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
    /* After ") ": the state (field 3), threads (20), start time (22). A
     * zombie with no thread left holds nothing: gone (its main thread
     * alone ended, it runs on). */
    bool zombie = p[2] == 'Z' || p[2] == 'X';
    long threads = 0;
    for (int field = 2; field < 22 && p; field++)
        if ((p = strchr(p + 1, ' ')) && field + 1 == 20)
            threads = strtol(p + 1, NULL, 10);
    return !p || (zombie && threads <= 1) ? 0 : strtoull(p + 1, NULL, 10);
}

/* ---- the directories ---------------------------------------------------------- */

/* Opens dir (relative to at) if it is a directory of uid's that only uid
 * may enter: its descriptor, or -1. */
static int user_dir_open(int at, const char *dir, uid_t uid)
{
    int fd = openat(at, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd >= 0 && (fstat(fd, &st) || st.st_uid != uid || (st.st_mode & 077))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* The name of uid's directory in the base: cupool-<uid>. */
static void user_dir_name(uid_t uid, char *buf, size_t len)
{
    snprintf(buf, len, "cupool-%u", (unsigned)uid);
}

/* Whether name is one of uid's private directories (cupool-<uid>.XXXXXX). */
static bool private_dir_name(const char *name, uid_t uid)
{
    char prefix[32];
    int k = snprintf(prefix, sizeof(prefix), "cupool-%u.", (unsigned)uid);
    return !strncmp(name, prefix, (size_t)k) && strlen(name) == (size_t)k + 6;
}

/* Calls fn on every directory that may hold uid's pages, open: the
 * user's own, or, where a directory of that name is not the user's, each
 * private one. Stops at the first fn that returns non-zero and returns
 * that, else 0. */
static int each_dir(uid_t uid, int (*fn)(int dfd, void *arg), void *arg)
{
    const char *base = stats_page_dir();
    char name[32];
    user_dir_name(uid, name, sizeof(name));
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", base, name);
    int own = user_dir_open(AT_FDCWD, path, uid);
    if (own >= 0) {
        int r = fn(own, arg);
        close(own);
        return r;
    }
    struct stat st;
    if (lstat(path, &st) != 0)
        return 0; /* no pages of uid at all */
    DIR *b = opendir(base);
    int r = 0;
    for (struct dirent *e; !r && b && (e = readdir(b));) {
        if (!private_dir_name(e->d_name, uid))
            continue;
        int d = user_dir_open(dirfd(b), e->d_name, uid);
        if (d >= 0) {
            r = fn(d, arg);
            close(d);
        }
    }
    if (b)
        closedir(b);
    return r;
}

/* The page's name in its directory: <pid namespace>-<pid>. */
static void page_name(int pid, char *buf, size_t len)
{
    snprintf(buf, len, "%lu-%d", stats_pid_ns(), pid);
}

int stats_user_dir(char *path, size_t len, const char **why)
{
    const char *base = stats_page_dir();
    if ((*why = safefile_dir_refusal(base)))
        return -EACCES;
    char name[32];
    user_dir_name(geteuid(), name, sizeof(name));
    snprintf(path, len, "%s/%s", base, name);
    if (mkdir(path, 0700) && errno != EEXIST) {
        int err = errno;
        *why = strerror(err);
        return -err;
    }
    int fd = user_dir_open(AT_FDCWD, path, geteuid());
    if (fd < 0)
        *why = "it is another user's (made there first)";
    return fd < 0 ? -EEXIST : fd;
}

static int writer_dir(stats_page *p, const char **why, bool *passed_over)
{
    int fd = stats_user_dir(p->dir, sizeof(p->dir), why);
    if (fd >= 0) {
        close(fd);
        return 0;
    }
    if (fd != -EEXIST) /* not one another user made first */
        return -1;
    const char *base = stats_page_dir();
    char name[32];
    user_dir_name(geteuid(), name, sizeof(name));
    /* Not this user's: another user made it first. */
    *passed_over = true;
    snprintf(p->dir, sizeof(p->dir), "%s/%s.XXXXXX", base, name);
    if (!mkdtemp(p->dir)) {
        *why = strerror(errno);
        return -1;
    }
    p->own_dir = true;
    return 0;
}

/* ---- the writer --------------------------------------------------------------- */

stats_page *stats_page_create(const char **why, bool *passed_over)
{
    *passed_over = false;
    stats_page *p = calloc(1, sizeof(*p));
    if (!p) {
        *why = strerror(ENOMEM);
        return NULL;
    }
    char name[64], tmp[600];
    page_name((int)getpid(), name, sizeof(name));
    p->d = MAP_FAILED;
    int fd = -1, err = 0;
    if (writer_dir(p, why, passed_over)) {
        free(p);
        return NULL;
    }
    snprintf(p->path, sizeof(p->path), "%s/%s", p->dir, name);
    snprintf(tmp, sizeof(tmp), "%s/.%s.new", p->dir, name);
    unlink(tmp); /* this pid's own leftover: the directory is the user's */
    fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, 0600))
        err = errno;
    /* Reserve every byte now: on a full tmpfs the first touch of a sparse
     * page would raise SIGBUS in the program. */
    else if ((err = posix_fallocate(fd, 0, sizeof(page_data))) == 0) {
        p->d = mmap(NULL, sizeof(page_data), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        err = p->d == MAP_FAILED ? errno : 0;
    }
    if (fd >= 0)
        close(fd);
    if (!err) {
        p->d->version = PAGE_VERSION;
        p->d->size = sizeof(page_data);
        p->d->pid = (int32_t)getpid();
        p->d->uid = (uint32_t)geteuid();
        p->d->start_time = stats_start_time((int)getpid());
        atomic_thread_fence(memory_order_release);
        p->d->magic = PAGE_MAGIC; /* a reader trusts nothing before it */
        /* Whole: under its name (what was there is this pid's stale page). */
        if (rename(tmp, p->path))
            err = errno;
    }
    if (err) {
        *why = strerror(err);
        if (p->d != MAP_FAILED)
            munmap(p->d, sizeof(page_data));
        unlink(tmp);
        if (p->own_dir)
            rmdir(p->dir);
        free(p);
        return NULL;
    }
    return p;
}

const char *stats_page_path(const stats_page *p) { return p->path; }

void stats_page_publish(stats_page *p, const stats_view *v)
{
    uint64_t s = atomic_load_explicit(&p->d->seq, memory_order_relaxed);
    atomic_store_explicit(&p->d->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    size_t n = offsetof(stats_view, dev) + v->ndevices * sizeof(v->dev[0]);
    memcpy(&p->d->view, v, n);
    atomic_store_explicit(&p->d->seq, s + 2, memory_order_release);
}

uint64_t stats_page_pending(const stats_page *p, stats_request r)
{
    uint64_t asked = atomic_load_explicit(&p->d->asked[r], memory_order_acquire);
    uint64_t served = atomic_load_explicit(&p->d->served[r], memory_order_relaxed);
    return asked > served ? asked : 0;
}

void stats_page_answer(stats_page *p, stats_request r, uint64_t ticket)
{
    atomic_store_explicit(&p->d->served[r], ticket, memory_order_release);
}

uint64_t stats_nonce(void)
{
    uint64_t n = 0;
    if (getrandom(&n, sizeof(n), 0) != (ssize_t)sizeof(n))
        n = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)&n;
    return n | 1; /* never 0, which means free */
}

int stats_page_export(stats_page *p, const void *handle, uint64_t offset, uint64_t size,
                      int32_t device, uint32_t *slot, uint64_t *nonce)
{
    /* The same block again: the same slot and nonce, so every handle of
     * it stays good (CUDA's do). Else a free slot; else the next in turn:
     * an importer of the export replaced gets a clear error from the
     * nonce, never another block. */
    for (int i = 0; i < STATS_IPC_EXPORTS; i++) {
        page_export *e = &p->d->exports[i];
        uint64_t had = atomic_load(&e->nonce);
        if (had && e->offset == offset && e->size == size && e->device == device &&
            !memcmp(e->handle, handle, STATS_IPC_HANDLE)) {
            *slot = (uint32_t)i;
            *nonce = had;
            return 0;
        }
    }
    uint64_t n = stats_nonce();
    static unsigned next;
    int at = -1;
    for (int i = 0; i < STATS_IPC_EXPORTS && at < 0; i++)
        if (!atomic_load(&p->d->exports[i].nonce))
            at = i;
    if (at < 0)
        at = (int)(next++ % STATS_IPC_EXPORTS);
    page_export *e = &p->d->exports[at];
    atomic_store_explicit(&e->nonce, 0, memory_order_release);
    atomic_thread_fence(memory_order_release);
    memcpy(e->handle, handle, STATS_IPC_HANDLE);
    e->offset = offset;
    e->size = size;
    e->device = device;
    atomic_store_explicit(&e->nonce, n, memory_order_release);
    *slot = (uint32_t)at;
    *nonce = n;
    return 0;
}

void stats_page_remove(stats_page *p)
{
    if (!p)
        return;
    munmap(p->d, sizeof(page_data));
    unlink(p->path);
    if (p->own_dir)
        rmdir(p->dir);
    free(p);
}

void stats_page_forget(stats_page *p)
{
    if (!p)
        return;
    munmap(p->d, sizeof(page_data));
    free(p);
}

/* ---- readers ------------------------------------------------------------------ */

int stats_maps_find(int pid, bool (*fn)(const char *line, void *arg), void *arg)
{
    char path[64], line[1024], chunk[16384];
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == EACCES || errno == EPERM ? -1 : 0;
    bool found = false;
    size_t used = 0;
    for (ssize_t n; !found && (n = read(fd, chunk, sizeof(chunk))) > 0;)
        for (ssize_t i = 0; i < n && !found; i++) {
            if (chunk[i] != '\n') {
                if (used < sizeof(line) - 1)
                    line[used++] = chunk[i];
                continue;
            }
            line[used] = '\0';
            found = fn(line, arg);
            used = 0;
        }
    close(fd);
    return found ? 1 : 0;
}

static bool has_text(const char *line, void *want)
{
    return strstr(line, want) != NULL;
}

/* Whether process pid maps the file with device dev and inode ino: 1 or 0;
 * -1 if its maps cannot be read (a process that made itself not dumpable:
 * only its start time can tell then). */
int page_maps_file(int pid, dev_t dev, ino_t ino)
{
    char want[64];
    /* "start-end perms offset MAJ:MIN INODE path": match " MAJ:MIN INODE". */
    snprintf(want, sizeof(want), " %02x:%02x %lu ", major(dev), minor(dev),
             (unsigned long)ino);
    return stats_maps_find(pid, has_text, want);
}

/* Checks an open candidate: a regular file of uid, 0600, one link, the
 * page's size. */
bool page_file_ok(int fd, uid_t uid, struct stat *st)
{
    return fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_uid == uid &&
           (st->st_mode & 07777) == 0600 && st->st_nlink == 1 &&
           st->st_size == (off_t)sizeof(page_data);
}

bool page_pread_all(int fd, void *buf, size_t len, off_t off)
{
    return pread(fd, buf, len, off) == (ssize_t)len;
}

/* Validates the page open at fd for pid, of uid: 0 (live), -EPERM (not a
 * regular file of uid, 0600, one link, of the page's size), -EPROTO (not
 * a page), -ESRCH (stale: its process is gone or runs another image). */
static int page_check(int fd, int pid, uid_t uid)
{
    struct stat st;
    page_data h;
    if (!page_file_ok(fd, uid, &st))
        return -EPERM;
    if (!page_pread_all(fd, &h, offsetof(page_data, asked), 0))
        return -EPROTO;
    if (h.magic != PAGE_MAGIC || h.version != PAGE_VERSION ||
        h.size != sizeof(page_data) || h.pid != pid || h.uid != uid)
        return -EPROTO;
    uint64_t now = stats_start_time(pid);
    if (!now || (h.start_time && now != h.start_time) || !page_maps_file(pid, st.st_dev, st.st_ino))
        return -ESRCH; /* (an unreadable map, -1, leaves the start time to judge) */
    return 0;
}

/* The pid a page name (<namespace>-<pid>, this namespace's) names, or -1;
 * *tmp tells whether it is a page being made (.<name>.new). */
static int page_name_pid(const char *name, bool *tmp)
{
    char prefix[32];
    int k = snprintf(prefix, sizeof(prefix), "%lu-", stats_pid_ns());
    *tmp = name[0] == '.';
    if (*tmp)
        name++;
    if (strncmp(name, prefix, (size_t)k))
        return -1;
    char *end;
    long v = strtol(name + k, &end, 10);
    if (end == name + k || v <= 0 || v > (1L << 30) || name[k] == '-' || name[k] == '+')
        return -1;
    if (*tmp ? strcmp(end, ".new") : *end)
        return -1;
    return (int)v;
}

/* Opens entry name of directory dfd (flags: O_RDONLY or O_RDWR) and checks
 * it as pid's page of uid: 0 with *fd open, or page_check's error. */
static int page_at(int dfd, const char *name, int pid, uid_t uid, int flags, int *fd)
{
    int f = openat(dfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0)
        return -ENOENT;
    int err = page_check(f, pid, uid);
    if (err)
        close(f);
    else
        *fd = f;
    return err;
}

/* The user whose page pid's is: the caller's own; for root, the user the
 * process runs as (root may read and flush any process's page). */
static uid_t page_owner(int pid)
{
    uid_t me = geteuid();
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d", pid);
    return me == 0 && stat(path, &st) == 0 ? st.st_uid : me;
}

typedef struct page_find {
    int pid, flags, fd, best;
    uid_t uid;
} page_find;

static int find_in(int dfd, void *arg)
{
    page_find *f = arg;
    char name[64];
    page_name(f->pid, name, sizeof(name));
    int err = page_at(dfd, name, f->pid, f->uid, f->flags, &f->fd);
    if (!err)
        return 1;
    if (err == -ESRCH || (f->best == -ENOENT && err != -ENOENT))
        f->best = err;
    return 0;
}

/* Opens pid's live page (flags: O_RDONLY or O_RDWR) into *fd. 0, or the
 * most telling error seen: -ESRCH (a stale page), -EPROTO or -EPERM (only
 * files that are not pages), -ENOENT (none). */
static int page_open(int pid, int flags, int *fd)
{
    page_find f = {.pid = pid, .flags = flags, .fd = -1, .best = -ENOENT,
                   .uid = page_owner(pid)};
    if (each_dir(f.uid, find_in, &f) == 1) {
        *fd = f.fd;
        return 0;
    }
    return f.best;
}

/* Copies the view under the seqlock, with pread. */
int page_read_view(int fd, stats_view *v)
{
    const off_t seq = offsetof(page_data, seq), view = offsetof(page_data, view);
    for (int tries = 0; tries < 1000; tries++) {
        uint64_t s1, s2;
        if (!page_pread_all(fd, &s1, sizeof(s1), seq))
            return -EPROTO;
        if (s1 & 1)
            continue;
        if (!page_pread_all(fd, v, sizeof(*v), view) || !page_pread_all(fd, &s2, sizeof(s2), seq))
            return -EPROTO;
        if (s1 != s2)
            continue;
        if (v->ndevices > STATS_MAX_DEVICES || v->ncomms > STATS_MAX_COMMS)
            return -EPROTO;
        v->comm[sizeof(v->comm) - 1] = '\0';
        uint64_t pause[2]; /* paused_since, paused_needs: cupool pause's */
        if (!page_pread_all(fd, pause, sizeof(pause), offsetof(page_data, paused_since)))
            return -EPROTO;
        v->proc.paused_since = pause[0];
        v->proc.paused_needs = pause[0] ? pause[1] : 0;
        return 0;
    }
    return -EAGAIN;
}

int stats_page_read(int pid, stats_view *v)
{
    int fd, err = page_open(pid, O_RDONLY, &fd);
    if (err)
        return err;
    err = page_read_view(fd, v);
    close(fd);
    return err;
}

int stats_page_lock(int pid)
{
    int fd, err = page_open(pid, O_RDONLY, &fd);
    if (err)
        return err;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0)
        return fd;
    err = -errno;
    close(fd);
    return err;
}

/* The request counters are raised through a mapping; a page truncated under
 * it (only its owner can) raises SIGBUS, which is caught here. */
static sigjmp_buf bus_jump;
static void on_bus(int sig) { (void)sig; siglongjmp(bus_jump, 1); }

/* Runs fn(page, arg) on pid's page mapped for writing, with SIGBUS caught
 * (a page truncated by its owner): 0, -EPROTO (SIGBUS) or as page_open. */
static int page_write(int pid, void (*fn)(page_data *, void *), void *arg)
{
    int fd, err = page_open(pid, O_RDWR, &fd);
    if (err)
        return err;
    void *m = mmap(NULL, sizeof(page_data), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return -errno;
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_bus;
    sigaction(SIGBUS, &sa, &old);
    err = -EPROTO;
    if (!sigsetjmp(bus_jump, 1)) {
        fn(m, arg);
        err = 0;
    }
    sigaction(SIGBUS, &old, NULL);
    munmap(m, sizeof(page_data));
    return err;
}

typedef struct page_count {
    stats_request r;
    uint64_t got;
    const stats_nccl_ask *ask; /* STATS_REQ_NCCL's */
} page_count;

static void count_up(page_data *d, void *arg)
{
    page_count *c = arg;
    c->got = atomic_fetch_add(&d->asked[c->r], 1) + 1;
}

typedef struct page_pause { uint64_t since, needs; } page_pause;

static void mark_paused(page_data *d, void *arg)
{
    const page_pause *pp = arg;
    if (!pp->since) /* running again: the mark goes first */
        atomic_store(&d->paused_since, 0);
    atomic_store(&d->paused_needs, pp->needs);
    atomic_store(&d->paused_since, pp->since);
}

int stats_page_import(int pid, uint32_t slot, uint64_t nonce, void *handle,
                      uint64_t *offset, uint64_t *size, int32_t *device)
{
    if (slot >= STATS_IPC_EXPORTS || !nonce)
        return -EINVAL;
    int fd, err = page_open(pid, O_RDONLY, &fd);
    if (err)
        return err;
    off_t at = (off_t)(offsetof(page_data, exports) + slot * sizeof(page_export));
    page_export e;
    uint64_t again = 0;
    bool ok = page_pread_all(fd, &e, sizeof(e), at) &&
              page_pread_all(fd, &again, sizeof(again), at + (off_t)offsetof(page_export, nonce));
    close(fd);
    if (!ok)
        return -EPROTO;
    if (atomic_load(&e.nonce) != nonce || again != nonce)
        return -ESTALE; /* exported again since, or never */
    memcpy(handle, e.handle, STATS_IPC_HANDLE);
    *offset = e.offset;
    *size = e.size;
    *device = e.device;
    return 0;
}

int stats_page_ask(int pid, stats_request r, uint64_t *ticket)
{
    page_count c = {r, 0, NULL};
    int err = page_write(pid, count_up, &c);
    *ticket = c.got;
    return err;
}

/* Writes the gate's request, then counts it up (the helper reads the
 * request once it sees the count: acquire). */
static void ask_nccl(page_data *d, void *arg)
{
    const stats_nccl_ask *a = ((const page_count *)arg)->ask;
    memcpy(&d->nccl_ask, a, sizeof(*a));
    page_count *c = arg;
    c->got = atomic_fetch_add(&d->asked[STATS_REQ_NCCL], 1) + 1;
}

int stats_page_ask_nccl(int pid, const stats_nccl_ask *a, uint64_t *ticket)
{
    page_count c = {STATS_REQ_NCCL, 0, a};
    int err = page_write(pid, ask_nccl, &c);
    *ticket = c.got;
    return err;
}

void stats_page_nccl_asked(const stats_page *p, stats_nccl_ask *a)
{
    memcpy(a, &p->d->nccl_ask, sizeof(*a));
    if (a->ntargets > STATS_MAX_COMMS)
        a->ntargets = STATS_MAX_COMMS;
}

int stats_page_mark_paused(int pid, uint64_t since_ns, uint64_t needs)
{
    page_pause pp = {since_ns, needs};
    return page_write(pid, mark_paused, &pp);
}

int stats_page_request(int pid, stats_request r, double timeout, stats_view *before,
                       stats_view *after)
{
    uint64_t ticket;
    int err = stats_page_read(pid, before);
    if (!err)
        err = stats_page_ask(pid, r, &ticket);
    if (err)
        return err;
    struct timespec t0, now, tick = {0, 10000000L};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        nanosleep(&tick, NULL);
        int got = stats_page_answered(pid, r, ticket);
        if (got < 0)
            return got;
        if (got && stats_page_read(pid, after) == 0)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9 <
             timeout);
    return -ETIMEDOUT;
}

int stats_page_answered(int pid, stats_request r, uint64_t ticket)
{
    int fd, err = page_open(pid, O_RDONLY, &fd);
    if (err)
        return err;
    uint64_t served;
    bool ok = page_pread_all(fd, &served, sizeof(served),
                        offsetof(page_data, served) + r * sizeof(uint64_t));
    close(fd);
    return !ok ? -EPROTO : served >= ticket;
}

typedef struct page_listing {
    int *pids;
    size_t max, n, gone;
    bool clean;
} page_listing;

/* Whether a page being made by pid was left behind: pid is gone. */
static bool tmp_stale(int pid)
{
    return stats_start_time(pid) == 0;
}

static int list_in(int dfd, void *arg)
{
    page_listing *l = arg;
    DIR *dir = fdopendir(dup(dfd));
    size_t here = 0, gone = 0;
    for (struct dirent *e; dir && (e = readdir(dir));) {
        if (e->d_name[0] == '.' && (!e->d_name[1] || !strcmp(e->d_name, "..")))
            continue;
        here++;
        bool tmp;
        int pid = page_name_pid(e->d_name, &tmp), f;
        if (pid < 0)
            continue;
        if (tmp) {
            if (l->clean && tmp_stale(pid) && unlinkat(dfd, e->d_name, 0) == 0) {
                l->gone++;
                gone++;
            }
            continue;
        }
        int err = page_at(dfd, e->d_name, pid, geteuid(), O_RDONLY, &f);
        if (!err)
            close(f);
        if (err == -ESRCH && l->clean && unlinkat(dfd, e->d_name, 0) == 0) {
            l->gone++;
            gone++;
        }
        if (err)
            continue;
        bool dup = false;
        for (size_t i = 0; i < l->n; i++)
            dup |= l->pids[i] == pid;
        if (!dup && l->n < l->max)
            l->pids[l->n++] = pid;
    }
    if (dir)
        closedir(dir);
    /* A private directory emptied of stale pages goes too. */
    if (l->clean && here && here == gone) {
        char self[64];
        snprintf(self, sizeof(self), "/proc/self/fd/%d", dfd);
        char path[600];
        ssize_t k = readlink(self, path, sizeof(path) - 1);
        if (k > 0) {
            path[k] = '\0';
            const char *slash = strrchr(path, '/');
            if (slash && private_dir_name(slash + 1, geteuid()))
                rmdir(path);
        }
    }
    return 0;
}

size_t stats_page_list(int *pids, size_t max, bool clean, size_t *removed)
{
    page_listing l = {.pids = pids, .max = max, .clean = clean};
    each_dir(geteuid(), list_in, &l);
    if (removed)
        *removed = l.gone;
    return l.n;
}
