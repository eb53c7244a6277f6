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
 * Nothing on a page is trusted. Its name is
 * cupool-<uid>-<pid namespace>-<pid>[.N] (the namespace keeps containers
 * that share /dev/shm apart; .N when the plain name is taken, so that files
 * planted for future pids cannot keep a process from its page). The writer
 * creates it with O_EXCL|O_NOFOLLOW, so nothing at that name is followed or
 * truncated. A reader opens it without following links or blocking and
 * accepts it only if it is a regular file owned by the caller, mode 0600,
 * with one link, of the exact size, with the right header; and only as
 * long as the process named in it maps that very file (its device and
 * inode in /proc/PID/maps), which proves the page belongs to the process
 * image running now: a page left behind by exec, or by a process whose pid
 * was reused, is stale.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "stats.h"

#define PAGE_MAGIC 0x3345474150504f43ull /* "COPPAGE3" */
enum { PAGE_VERSION = 7, PAGE_SUFFIXES = 16 };

/* A block exported for IPC (stats_page_export): nonce is written last
 * (release) and read first and last by importers; 0 = free slot. */
typedef struct page_export {
    _Atomic uint64_t nonce;
    uint8_t handle[STATS_IPC_HANDLE];
    uint64_t offset, size;
    int32_t device;
    uint32_t pad;
} page_export;

typedef struct page_data {
    uint64_t magic;
    uint32_t version, size;
    int32_t pid;
    uint32_t uid;
    uint64_t start_time;       /* /proc/PID/stat field 22 */
    _Atomic uint64_t asked[STATS_NREQUESTS];  /* raised by readers */
    _Atomic uint64_t served[STATS_NREQUESTS]; /* raised by the helper */
    _Atomic uint64_t seq;      /* odd while the writer writes */
    stats_view view;
    page_export exports[STATS_IPC_EXPORTS];
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

/* The inode of this process's pid namespace, 0 if /proc cannot tell. */
static unsigned long pid_ns(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long)st.st_ino : 0;
}

/* "cupool-<uid>-<ns>-" : every page name of this user and namespace. */
static void name_prefix(char *buf, size_t len)
{
    snprintf(buf, len, "cupool-%u-%lu-", (unsigned)geteuid(), pid_ns());
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
    p += 2;
    for (int field = 3; field < 22 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    return p ? strtoull(p, NULL, 10) : 0;
}

/* ---- the writer --------------------------------------------------------------- */

stats_page *stats_page_create(void)
{
    stats_page *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    char prefix[64];
    name_prefix(prefix, sizeof(prefix));
    int fd = -1;
    for (int n = 0; fd < 0 && n < PAGE_SUFFIXES; n++) {
        int w = n ? snprintf(p->path, sizeof(p->path), "%s/%s%d.%d", stats_page_dir(),
                             prefix, (int)getpid(), n)
                  : snprintf(p->path, sizeof(p->path), "%s/%s%d", stats_page_dir(),
                             prefix, (int)getpid());
        if (w < 0 || (size_t)w >= sizeof(p->path)) {
            errno = ENAMETOOLONG;
            break;
        }
        fd = open(p->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
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
    p->d->uid = (uint32_t)geteuid();
    p->d->start_time = start_time((int)getpid());
    atomic_thread_fence(memory_order_release);
    p->d->magic = PAGE_MAGIC; /* last: a reader trusts nothing before it */
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
    uint64_t n = 0;
    if (getrandom(&n, sizeof(n), 0) != (ssize_t)sizeof(n))
        n = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)&n;
    n |= 1; /* never 0, which means free */
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

/* Whether process pid maps the file with device dev and inode ino: 1 or 0;
 * -1 if its maps cannot be read (a process that made itself not dumpable:
 * only its start time can tell then). */
static int maps_file(int pid, dev_t dev, ino_t ino)
{
    char path[64], want[64], line[512], chunk[8192];
    snprintf(path, sizeof(path), "/proc/%d/maps", pid);
    /* "start-end perms offset MAJ:MIN INODE path": match " MAJ:MIN INODE". */
    snprintf(want, sizeof(want), " %02x:%02x %lu ", major(dev), minor(dev),
                      (unsigned long)ino);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == EACCES || errno == EPERM ? -1 : 0;
    bool found = false;
    size_t used = 0;
    for (ssize_t n; !found && (n = read(fd, chunk, sizeof(chunk))) > 0;) {
        for (ssize_t i = 0; i < n && !found; i++) {
            if (chunk[i] != '\n') {
                if (used < sizeof(line) - 1)
                    line[used++] = chunk[i];
                continue;
            }
            line[used] = '\0';
            found = strstr(line, want) != NULL;
            used = 0;
        }
    }
    close(fd);
    return found ? 1 : 0;
}

/* Checks an open candidate: a regular file of this user, 0600, one link,
 * the page's size. */
static bool file_ok(int fd, struct stat *st)
{
    return fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_uid == geteuid() &&
           (st->st_mode & 07777) == 0600 && st->st_nlink == 1 &&
           st->st_size == (off_t)sizeof(page_data);
}

static bool pread_all(int fd, void *buf, size_t len, off_t off)
{
    return pread(fd, buf, len, off) == (ssize_t)len;
}

/* Validates the page open at fd for pid: 0 (live), -EPERM (not a regular
 * file of this user, 0600, one link, of the page's size), -EPROTO (not a
 * page), -ESRCH (stale: its process is gone or runs another image). */
static int page_check(int fd, int pid)
{
    struct stat st;
    page_data h;
    if (!file_ok(fd, &st))
        return -EPERM;
    if (!pread_all(fd, &h, offsetof(page_data, asked), 0))
        return -EPROTO;
    if (h.magic != PAGE_MAGIC || h.version != PAGE_VERSION ||
        h.size != sizeof(page_data) || h.pid != pid || h.uid != geteuid())
        return -EPROTO;
    uint64_t now = start_time(pid);
    if (!now || (h.start_time && now != h.start_time) || !maps_file(pid, st.st_dev, st.st_ino))
        return -ESRCH; /* (an unreadable map, -1, leaves the start time to judge) */
    return 0;
}

/* The pid a page name names (prefix, pid, optionally .N), or -1 if name is
 * not one. */
static int page_name_pid(const char *name, const char *prefix)
{
    size_t k = strlen(prefix);
    if (strncmp(name, prefix, k))
        return -1;
    char *end;
    long v = strtol(name + k, &end, 10);
    if (end == name + k || v <= 0 || v > (1L << 30))
        return -1;
    if (*end == '.') {
        char *e2;
        long n = strtol(end + 1, &e2, 10);
        if (e2 == end + 1 || *e2 || n <= 0 || n >= PAGE_SUFFIXES)
            return -1;
    } else if (*end) {
        return -1;
    }
    return (int)v;
}

/* Opens entry name of dir (flags: O_RDONLY or O_RDWR) and checks it as
 * pid's page: 0 with *fd open, or page_check's error. */
static int page_at(DIR *dir, const char *name, int pid, int flags, int *fd)
{
    int f = openat(dirfd(dir), name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0)
        return -ENOENT;
    int err = page_check(f, pid);
    if (err)
        close(f);
    else
        *fd = f;
    return err;
}

/* Opens pid's live page (flags: O_RDONLY or O_RDWR) into *fd. 0, or the
 * most telling error seen: -ESRCH (a stale page), -EPROTO or -EPERM (only
 * files that are not pages), -ENOENT (none). */
static int page_open(int pid, int flags, int *fd)
{
    char prefix[64];
    name_prefix(prefix, sizeof(prefix));
    DIR *dir = opendir(stats_page_dir());
    if (!dir)
        return -ENOENT;
    int best = -ENOENT;
    for (struct dirent *e; (e = readdir(dir));) {
        if (page_name_pid(e->d_name, prefix) != pid)
            continue;
        int err = page_at(dir, e->d_name, pid, flags, fd);
        if (!err) {
            closedir(dir);
            return 0;
        }
        if (err == -ESRCH || (best == -ENOENT && err != -ENOENT))
            best = err;
    }
    closedir(dir);
    return best;
}

/* Copies the view under the seqlock, with pread. */
static int read_view(int fd, stats_view *v)
{
    const off_t seq = offsetof(page_data, seq), view = offsetof(page_data, view);
    for (int tries = 0; tries < 1000; tries++) {
        uint64_t s1, s2;
        if (!pread_all(fd, &s1, sizeof(s1), seq))
            return -EPROTO;
        if (s1 & 1)
            continue;
        if (!pread_all(fd, v, sizeof(*v), view) || !pread_all(fd, &s2, sizeof(s2), seq))
            return -EPROTO;
        if (s1 != s2)
            continue;
        if (v->ndevices > STATS_MAX_DEVICES)
            return -EPROTO;
        v->comm[sizeof(v->comm) - 1] = '\0';
        return 0;
    }
    return -EAGAIN;
}

int stats_page_read(int pid, stats_view *v)
{
    int fd, err = page_open(pid, O_RDONLY, &fd);
    if (err)
        return err;
    err = read_view(fd, v);
    close(fd);
    return err;
}

/* The request counters are raised through a mapping; a page truncated under
 * it (only its owner can) raises SIGBUS, which is caught here. */
static sigjmp_buf bus_jump;
static void on_bus(int sig) { (void)sig; siglongjmp(bus_jump, 1); }

static int page_add(int pid, size_t off, uint64_t *got)
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
        _Atomic uint64_t *c = (_Atomic uint64_t *)((char *)m + off);
        *got = atomic_fetch_add(c, 1) + 1;
        err = 0;
    }
    sigaction(SIGBUS, &old, NULL);
    munmap(m, sizeof(page_data));
    return err;
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
    bool ok = pread_all(fd, &e, sizeof(e), at) &&
              pread_all(fd, &again, sizeof(again), at + (off_t)offsetof(page_export, nonce));
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
    return page_add(pid, offsetof(page_data, asked) + r * sizeof(uint64_t), ticket);
}

int stats_page_answered(int pid, stats_request r, uint64_t ticket)
{
    int fd, err = page_open(pid, O_RDONLY, &fd);
    if (err)
        return err;
    uint64_t served;
    bool ok = pread_all(fd, &served, sizeof(served),
                        offsetof(page_data, served) + r * sizeof(uint64_t));
    close(fd);
    return !ok ? -EPROTO : served >= ticket;
}

size_t stats_page_list(int *pids, size_t max, bool clean, size_t *removed)
{
    char prefix[64];
    name_prefix(prefix, sizeof(prefix));
    size_t n = 0, gone = 0;
    DIR *dir = opendir(stats_page_dir());
    for (struct dirent *e; dir && (e = readdir(dir));) {
        int pid = page_name_pid(e->d_name, prefix), f;
        if (pid < 0)
            continue;
        int err = page_at(dir, e->d_name, pid, O_RDONLY, &f);
        if (!err)
            close(f);
        if (err == -ESRCH && clean)
            gone += unlinkat(dirfd(dir), e->d_name, 0) == 0;
        if (err)
            continue;
        bool dup = false;
        for (size_t i = 0; i < n; i++)
            dup |= pids[i] == pid;
        if (!dup && n < max)
            pids[n++] = pid;
    }
    if (dir)
        closedir(dir);
    if (removed)
        *removed = gone;
    return n;
}
