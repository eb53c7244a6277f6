/* SPDX-License-Identifier: Apache-2.0 */
/*
 * groupseg.c - see groupseg.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "groupseg.h"
#include "safefile.h"

#define GROUP_MAGIC 0x3150524750504f43ull /* "COPPGRP1" */
enum { GROUP_VERSION = 4 };
enum { SEGMENT_FILE_MAX = GROUP_NAME_MAX + 96 }; /* a segment's file name, boot id and all */

typedef struct slot {
    _Atomic int32_t pid;           /* 0 = free */
    _Atomic uint32_t ending;       /* its program has ended; the process
                                      gives its memory back as it goes */
    uint64_t start_time;           /* stats_start_time of pid */
    char comm[16];
    _Atomic uint64_t held[STATS_MAX_DEVICES];
    _Atomic uint64_t cached[STATS_MAX_DEVICES];
    _Atomic uint64_t asked, served;  /* flush requests of other members */
    _Atomic uint64_t ask_want;     /* what the requests not served want
                                      (0 = everything; framework.h) */
    _Atomic uint64_t wait_seq;     /* its turn in the queue of waiters;
                                      0 = not waiting */
    _Atomic int32_t wait_dev;
    _Atomic uint32_t wait_taking;  /* its turn came: it allocates, still
                                      in its place (group_wait_taking) */
    _Atomic uint64_t wait_bytes, wait_since_ns; /* CLOCK_REALTIME */
} slot;

typedef struct group_data {
    uint64_t magic;
    uint32_t version, size;
    uint32_t uid, pad;
    group_cap caps[STATS_MAX_DEVICES];
    pthread_mutex_t lock;          /* robust, process-shared */
    _Atomic uint64_t wait_next;    /* the last turn handed out */
    slot slots[GROUP_MEMBERS];
} group_data;

struct group {
    group_data *d;
    slot *me;
    atomic_bool left;  /* the slot may be another member's now */
    char where[512];   /* the directory the group met in */
    const char *passed; /* why the page directory was not it, or NULL */
};

bool group_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (!n || n > GROUP_NAME_MAX || name[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* ---- the lock and the members ----------------------------------------------- */

static void lock(group_data *d)
{
    if (pthread_mutex_lock(&d->lock) == EOWNERDEAD)
        pthread_mutex_consistent(&d->lock); /* its slot is reaped as any dead one */
}

static void unlock(group_data *d) { pthread_mutex_unlock(&d->lock); }

/* Whether the process of slot s still runs: the same pid and start time. */
static bool alive(const slot *s)
{
    int pid = atomic_load(&s->pid);
    return pid > 0 && stats_start_time(pid) == s->start_time;
}

/* Frees the slots of dead members. Needs the lock. */
static int reap_locked(group_data *d)
{
    int n = 0;
    for (int i = 0; i < GROUP_MEMBERS; i++) {
        slot *s = &d->slots[i];
        if (atomic_load(&s->pid) && !alive(s)) {
            atomic_store(&s->pid, 0);
            n++;
        }
    }
    return n;
}

/* What the members hold on dev (dead ones too until reaped). Needs the
 * lock. */
static uint64_t held_locked(const group_data *d, int dev)
{
    uint64_t sum = 0;
    for (int i = 0; i < GROUP_MEMBERS; i++)
        if (atomic_load(&d->slots[i].pid))
            sum += atomic_load(&d->slots[i].held[dev]);
    return sum;
}

int group_take(group *g, int dev, uint64_t size, uint64_t lim)
{
    group_data *d = g->d;
    if (dev < 0 || dev >= STATS_MAX_DEVICES)
        return atomic_load(&g->left) ? 0 : -EDQUOT;
    lock(d);
    if (atomic_load(&g->left)) { /* under the lock: the slot may be another's */
        unlock(d);
        return 0;
    }
    uint64_t sum = held_locked(d, dev);
    if (lim && (size > lim || sum > lim - size) && reap_locked(d))
        sum = held_locked(d, dev);
    int err = lim && (size > lim || sum > lim - size) ? -EDQUOT : 0;
    if (!err)
        atomic_fetch_add(&g->me->held[dev], size);
    unlock(d);
    return err;
}

/* Adds delta to what this member holds on dev, under the lock, unless it
 * left: its slot may be a new member's by then. */
static void held_add(group *g, int dev, int64_t delta)
{
    if (dev < 0 || dev >= STATS_MAX_DEVICES)
        return;
    lock(g->d);
    if (!atomic_load(&g->left))
        atomic_fetch_add(&g->me->held[dev], (uint64_t)delta);
    unlock(g->d);
}

void group_charge(group *g, int dev, uint64_t size) { held_add(g, dev, (int64_t)size); }

void group_give(group *g, int dev, uint64_t size) { held_add(g, dev, -(int64_t)size); }

group_cap group_cap_of(const group *g, int dev)
{
    return dev >= 0 && dev < STATS_MAX_DEVICES ? g->d->caps[dev] : (group_cap){0, 0, 0};
}

uint64_t group_held(group *g, int dev)
{
    lock(g->d);
    reap_locked(g->d);
    uint64_t sum = held_locked(g->d, dev);
    unlock(g->d);
    return sum;
}

void group_set_cached(group *g, int dev, uint64_t cached)
{
    lock(g->d);
    if (!atomic_load(&g->left)) /* under the lock, as held_add */
        atomic_store(&g->me->cached[dev], cached);
    unlock(g->d);
}

int group_ask_others(group *g, uint64_t *tickets, uint64_t want)
{
    int n = 0;
    lock(g->d);
    reap_locked(g->d);
    for (int i = 0; i < GROUP_MEMBERS; i++) {
        slot *s = &g->d->slots[i];
        tickets[i] = 0;
        if (s == g->me || !atomic_load(&s->pid))
            continue;
        bool pending = atomic_load(&s->asked) > atomic_load(&s->served);
        /* Asked again (want): not while its last request is unanswered,
         * and not while it waits for a turn itself (its cache went back
         * when it was refused; its framework's is held by its waiting
         * thread), so that one slow member delays no one's next ask. */
        if (want && (pending || atomic_load(&s->wait_seq)))
            continue;
        atomic_store(&s->ask_want, pending ? stats_want_merge(atomic_load(&s->ask_want), want)
                                           : want);
        tickets[i] = atomic_fetch_add(&s->asked, 1) + 1;
        n++;
    }
    unlock(g->d);
    return n;
}

bool group_answered(group *g, const uint64_t *tickets)
{
    for (int i = 0; i < GROUP_MEMBERS; i++) {
        slot *s = &g->d->slots[i];
        if (tickets[i] && atomic_load(&s->pid) && alive(s) &&
            atomic_load(&s->served) < tickets[i])
            return false;
    }
    return true;
}

uint64_t group_flush_pending(group *g, uint64_t *want)
{
    if (atomic_load(&g->left))
        return 0;
    lock(g->d); /* the ticket and its want together */
    uint64_t asked = atomic_load(&g->me->asked), served = atomic_load(&g->me->served);
    *want = atomic_load(&g->me->ask_want);
    unlock(g->d);
    return asked > served ? asked : 0;
}

/* ---- waiting for a turn ---------------------------------------------------------- */

void group_wait_begin(group *g, int dev, uint64_t bytes)
{
    lock(g->d);
    if (!atomic_load(&g->left)) {
        atomic_store(&g->me->wait_dev, dev);
        atomic_store(&g->me->wait_bytes, bytes);
        atomic_store(&g->me->wait_taking, 0);
        /* A member whose turn came but whose take fell short waits again
         * in the place it had. */
        if (!atomic_load(&g->me->wait_seq)) {
            atomic_store(&g->me->wait_since_ns, clock_unix_ns());
            atomic_store(&g->me->wait_seq, atomic_fetch_add(&g->d->wait_next, 1) + 1);
        }
    }
    unlock(g->d);
}

void group_wait_taking(group *g)
{
    lock(g->d);
    if (!atomic_load(&g->left) && atomic_load(&g->me->wait_seq))
        atomic_store(&g->me->wait_taking, 1);
    unlock(g->d);
}

void group_wait_end(group *g)
{
    lock(g->d);
    if (!atomic_load(&g->left)) {
        atomic_store(&g->me->wait_seq, 0);
        atomic_store(&g->me->wait_taking, 0);
    }
    unlock(g->d);
}

/* Whether slot s is a live member waiting (its turn in *seq). Needs the
 * lock. */
static bool waits(const slot *s, uint64_t *seq)
{
    *seq = atomic_load(&s->wait_seq);
    return atomic_load(&s->pid) && *seq;
}

bool group_waiting(group *g)
{
    uint64_t seq;
    for (int i = 0; i < GROUP_MEMBERS; i++)
        if (waits(&g->d->slots[i], &seq))
            return true;
    return false;
}

bool group_wait_first(group *g, int dev)
{
    bool first = true;
    lock(g->d);
    uint64_t mine = atomic_load(&g->me->wait_seq), seq;
    for (int i = 0; i < GROUP_MEMBERS && first; i++) {
        const slot *s = &g->d->slots[i];
        if (s != g->me && waits(s, &seq) && seq < mine && atomic_load(&s->wait_dev) == dev)
            first = false;
    }
    unlock(g->d);
    return first;
}

bool group_wait_stuck(group *g, int dev, uint64_t lim)
{
    bool stuck = true;
    lock(g->d);
    reap_locked(g->d);
    uint64_t mine = atomic_load(&g->me->wait_seq), seq;
    uint64_t held = dev >= 0 && dev < STATS_MAX_DEVICES ? held_locked(g->d, dev) : 0;
    /* The first waiter on dev: the one that takes its turn next. */
    const slot *first = NULL;
    uint64_t first_seq = UINT64_MAX;
    for (int i = 0; i < GROUP_MEMBERS; i++) {
        const slot *s = &g->d->slots[i];
        if (waits(s, &seq) && atomic_load(&s->wait_dev) == dev && seq < first_seq)
            first = s, first_seq = seq;
    }
    for (int i = 0; i < GROUP_MEMBERS && stuck; i++) {
        const slot *s = &g->d->slots[i];
        if (s == g->me || !atomic_load(&s->pid))
            continue;
        /* A member not waiting may still free; one ending will; one
         * taking its turn goes on once it took it; the first waiter on
         * dev, if its request fits the budget now, takes its turn at its
         * next look (a later one that fits waits behind it all the same). */
        bool goes = s == first && lim && held <= lim && atomic_load(&s->wait_bytes) <= lim - held;
        stuck = waits(s, &seq) && seq < mine && !atomic_load(&s->ending) &&
                !atomic_load(&s->wait_taking) && !goes;
    }
    unlock(g->d);
    return stuck && mine;
}

void group_flush_answer(group *g, uint64_t ticket) { atomic_store(&g->me->served, ticket); }

void group_set_ending(group *g)
{
    if (!atomic_load(&g->left))
        atomic_store(&g->me->ending, 1);
}

uint64_t group_ending_held(group *g, int dev)
{
    uint64_t sum = 0;
    lock(g->d);
    reap_locked(g->d);
    for (int i = 0; i < GROUP_MEMBERS; i++) {
        slot *s = &g->d->slots[i];
        if (s != g->me && atomic_load(&s->pid) && atomic_load(&s->ending))
            sum += atomic_load(&s->held[dev]);
    }
    unlock(g->d);
    return sum;
}

int group_reap(group *g)
{
    lock(g->d);
    int n = reap_locked(g->d);
    unlock(g->d);
    return n;
}

/* ---- the segment ------------------------------------------------------------- */

/* Checks an open candidate: a regular file of this user, 0600, one link,
 * the segment's size, with the right header. 0, -EPERM or -EPROTO. */
static int segment_check(int fd)
{
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (st.st_mode & 07777) != 0600 || st.st_nlink != 1 ||
        st.st_size != (off_t)sizeof(group_data))
        return -EPERM;
    group_data h;
    if (pread(fd, &h, offsetof(group_data, lock), 0) != (ssize_t)offsetof(group_data, lock) ||
        h.magic != GROUP_MAGIC || h.version != GROUP_VERSION || h.size != sizeof(group_data) ||
        h.uid != geteuid())
        return -EPROTO;
    return 0;
}

/* Opens the existing segment name in directory dfd, checked: fd or -errno. */
static int segment_open(int dfd, const char *file)
{
    int fd = openat(dfd, file, O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int err = segment_check(fd);
    if (err) {
        close(fd);
        return err;
    }
    return fd;
}

/* Makes the segment under a temporary name and links it into place: the
 * open descriptor of the segment now there (this one, or another
 * process's made first), or -errno. */
static int segment_make(int dfd, const char *file, const group_cap *caps)
{
    char tmp[SEGMENT_FILE_MAX + 32];
    snprintf(tmp, sizeof(tmp), ".%s.%d.new", file, (int)getpid());
    unlinkat(dfd, tmp, 0);
    int fd = openat(dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return -errno;
    int err = fchmod(fd, 0600) ? errno : posix_fallocate(fd, 0, sizeof(group_data));
    group_data *d = err ? MAP_FAILED
                        : mmap(NULL, sizeof(group_data), PROT_READ | PROT_WRITE, MAP_SHARED,
                               fd, 0);
    if (!err && d == MAP_FAILED)
        err = errno;
    if (!err) {
        pthread_mutexattr_t a;
        pthread_mutexattr_init(&a);
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
        pthread_mutex_init(&d->lock, &a);
        pthread_mutexattr_destroy(&a);
        d->version = GROUP_VERSION;
        d->size = sizeof(group_data);
        d->uid = (uint32_t)geteuid();
        memcpy(d->caps, caps, sizeof(d->caps));
        d->magic = GROUP_MAGIC; /* (linked into place only after: no reader sooner) */
        munmap(d, sizeof(group_data));
        /* Moved into place in one step, never a second name meanwhile: a
         * member opening it as it is linked would see two links and
         * refuse it. Where the file system cannot, linked and unlinked. */
        if (renameat2(dfd, tmp, dfd, file, RENAME_NOREPLACE) == 0)
            tmp[0] = '\0';
        else if (errno != EEXIST && (errno != EINVAL ||
                                     (linkat(dfd, tmp, dfd, file, 0) && errno != EEXIST)))
            err = errno;
    }
    close(fd);
    if (tmp[0])
        unlinkat(dfd, tmp, 0);
    return err ? -err : segment_open(dfd, file);
}

/* ---- where the group meets ------------------------------------------------- */

/* The places a group of this user may meet, in the order every member
 * looks: the user's page directory (stats_user_dir), then, for when that
 * cannot be had (another user made a directory of its name first: a
 * squat that lasts until root removes it), two in directories no other
 * user can write in: $XDG_RUNTIME_DIR/cupool (the user's own tmpfs, mode
 * 0700, made by the login manager) and $HOME/.cache/cupool. A member
 * joins the first place holding the group and makes it in the first place
 * it can have, so members meet in one place whoever comes first, and a
 * place once taken is the user's until the user removes it. */
enum { PLACE_PAGES, PLACE_RUNTIME, PLACE_HOME, PLACES };

typedef struct place {
    char path[512];                /* the directory of the place looked at last */
    const char *failed[PLACES];    /* why a place could not be had, or NULL */
} place;

/* Opens directory name in at (made first if make) if it is this user's
 * and only it may enter: its descriptor, or -1 with *why. */
static int own_dir_at(int at, const char *name, bool make, const char **why)
{
    if (make && mkdirat(at, name, 0700) && errno != EEXIST) {
        *why = strerror(errno);
        return -1;
    }
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    if (fstat(fd, &st) || st.st_uid != geteuid() || (st.st_mode & 077)) {
        *why = "it is not a directory of this user's that only it may enter";
        close(fd);
        return -1;
    }
    return fd;
}

/* $XDG_RUNTIME_DIR/cupool, where XDG_RUNTIME_DIR is a directory of this
 * user's that only it may enter, reached by no link another user chose. */
static int runtime_dir_open(bool make, char *path, size_t len, const char **why)
{
    const char *run = secure_getenv("XDG_RUNTIME_DIR");
    if (!run || run[0] != '/') {
        *why = "XDG_RUNTIME_DIR is not set";
        return -1;
    }
    snprintf(path, len, "%s/cupool", run);
    int at = safefile_dir_open(run, why), fd = -1;
    struct stat st;
    if (at >= 0 && (fstat(at, &st) || st.st_uid != geteuid() || (st.st_mode & 077)))
        *why = "XDG_RUNTIME_DIR is not a directory of this user's that only it may enter";
    else if (at >= 0)
        fd = own_dir_at(at, "cupool", make, why);
    if (at >= 0)
        close(at);
    return fd;
}

/* $HOME/.cache/cupool, $HOME/.cache made (mode 0700) if make and missing;
 * both reached by no link another user chose, neither writable by others. */
static int home_dir_open(bool make, char *path, size_t len, const char **why)
{
    const char *home = secure_getenv("HOME");
    char cache[480];
    if (!home || home[0] != '/' ||
        snprintf(cache, sizeof(cache), "%s/.cache", home) >= (int)sizeof(cache)) {
        *why = "HOME is not set";
        return -1;
    }
    snprintf(path, len, "%s/cupool", cache);
    int at = safefile_dir_open(cache, why), fd = -1;
    if (at == -ENOENT && make) {
        int h = safefile_dir_open(home, why);
        if (h >= 0 && (mkdirat(h, ".cache", 0700) == 0 || errno == EEXIST))
            at = safefile_dir_open(cache, why);
        if (h >= 0)
            close(h);
    }
    if (at >= 0) {
        fd = own_dir_at(at, "cupool", make, why);
        close(at);
    }
    return fd;
}

/* Opens place k's directory (made if make; the page directory always
 * is), its path into path: its descriptor, or -1 with *why. */
static int place_open(int k, bool make, char *path, size_t len, const char **why)
{
    return k == PLACE_PAGES     ? stats_user_dir(path, len, why)
           : k == PLACE_RUNTIME ? runtime_dir_open(make, path, len, why)
                                : home_dir_open(make, path, len, why);
}

/* This boot's id (/proc/sys/kernel/random/boot_id, 36 characters) into
 * buf: 0, or -1 if it cannot be read. */
static int boot_id(char *buf, size_t len)
{
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 && len > 36 ? read(fd, buf, 36) : -1;
    if (fd >= 0)
        close(fd);
    if (n != 36)
        return -1;
    buf[36] = '\0';
    return strspn(buf, "0123456789abcdef-") == 36 ? 0 : -1;
}

/* The segment's file name for group name in place k: 0, or -1 (no boot
 * id for the home directory). */
static int segment_name(const char *name, int k, char *buf, size_t len)
{
    /* Members are known by pid and start time, which mean something only
     * inside one pid namespace: a group is one namespace's, as pages are.
     * A home directory outlives the boot and may be shared by machines:
     * the boot's id keeps each boot's group apart there (a segment left
     * by a crash could hold its lock for ever). */
    char boot[40];
    if (k != PLACE_HOME) {
        snprintf(buf, len, "group-%lu-%s", stats_pid_ns(), name);
        return 0;
    }
    if (boot_id(boot, sizeof(boot)))
        return -1;
    snprintf(buf, len, "group-%s-%lu-%s", boot, stats_pid_ns(), name);
    return 0;
}

/* Opens the segment of group name in place k, made there with caps if
 * caps and it is missing: its descriptor; -ENOENT when the segment or the
 * place is missing (why the place is, into pl->failed[k]); or -errno,
 * -EPERM, -EPROTO for a file there that is not the segment. */
static int place_segment(int k, const char *name, const group_cap *caps, place *pl)
{
    char file[SEGMENT_FILE_MAX];
    int dfd = place_open(k, caps != NULL, pl->path, sizeof(pl->path), &pl->failed[k]);
    if (dfd < 0)
        return -ENOENT;
    int fd = -ENOENT;
    if (segment_name(name, k, file, sizeof(file)))
        pl->failed[k] = "this boot's id cannot be read";
    else if ((fd = segment_open(dfd, file)) == -ENOENT && caps)
        fd = segment_make(dfd, file, caps);
    close(dfd);
    return fd;
}

static const char *error_text(int err)
{
    return err == -EPERM ? "a file there is not a group segment of this user (another "
                           "mode, owner, size or link count): refused"
           : err == -EPROTO ? "a file there is not a group segment this version reads "
                              "(corrupt, or from another version): refused"
                            : strerror(-err);
}

/* Why no place could take the group (make), from pl: in a buffer of the
 * calling thread's. */
static const char *no_place_text(const place *pl)
{
    static _Thread_local char text[600];
    const char *const *f = pl->failed;
    snprintf(text, sizeof(text), "no directory can hold it: the page directory: %s; "
             "$XDG_RUNTIME_DIR/cupool: %s; $HOME/.cache/cupool: %s",
             f[PLACE_PAGES] ? f[PLACE_PAGES] : "-", f[PLACE_RUNTIME] ? f[PLACE_RUNTIME] : "-",
             f[PLACE_HOME] ? f[PLACE_HOME] : "-");
    return text;
}

/* Opens the segment of group name: in the first place holding it, else,
 * if make, made with caps in the first place that can be had. Its
 * descriptor, with its place's path in pl->path; or -ENOENT (none, and
 * with make: no place) or place_segment's error, with *why. */
static int segment_find(const char *name, bool make, const group_cap *caps, place *pl,
                        const char **why)
{
    int fd = -ENOENT;
    memset(pl->failed, 0, sizeof(pl->failed));
    for (int k = 0; k < PLACES && fd == -ENOENT; k++)
        fd = place_segment(k, name, NULL, pl);
    for (int k = 0; make && k < PLACES && fd == -ENOENT; k++)
        fd = place_segment(k, name, caps, pl);
    if (fd >= 0)
        return fd;
    *why = fd != -ENOENT ? error_text(fd) : make ? no_place_text(pl) : strerror(ENOENT);
    return fd;
}

/* Maps the segment of group name (made with caps first if make and it
 * does not exist; where it is into pl): the mapping, or NULL with *err
 * (-ENOENT when there is none and, with make, no place for it, -errno,
 * -EPERM, -EPROTO) and *why. */
static group_data *segment_map(const char *name, bool make, const group_cap *caps, place *pl,
                               int *err, const char **why)
{
    int fd = segment_find(name, make, caps, pl, why);
    group_data *d = fd < 0 ? MAP_FAILED
                           : mmap(NULL, sizeof(group_data), PROT_READ | PROT_WRITE, MAP_SHARED,
                                  fd, 0);
    *err = fd < 0 ? fd : d == MAP_FAILED ? -errno : 0;
    if (fd >= 0)
        close(fd);
    if (fd >= 0 && *err)
        *why = error_text(*err);
    return d == MAP_FAILED ? NULL : d;
}

group *group_join(const char *name, group_cap *caps, const char **why)
{
    if (!group_name_ok(name)) {
        *why = "the name takes 1 to 64 of A-Z a-z 0-9 . _ - (not starting with .)";
        return NULL;
    }
    int err;
    place pl;
    group_data *d = segment_map(name, true, caps, &pl, &err, why);
    group *g = d ? calloc(1, sizeof(*g)) : NULL;
    if (!g) {
        if (d)
            *why = strerror(ENOMEM);
        if (d)
            munmap(d, sizeof(group_data));
        return NULL;
    }
    g->d = d;
    snprintf(g->where, sizeof(g->where), "%s", pl.path);
    g->passed = pl.failed[PLACE_PAGES];
    lock(d);
    reap_locked(d);
    /* A slot of this pid is this process before an exec (which runs no
     * destructor, so it never left): alive by pid and start time, but
     * nothing of it remains. */
    bool alive = false;
    for (int i = 0; i < GROUP_MEMBERS; i++) {
        if (atomic_load(&d->slots[i].pid) == (int32_t)getpid())
            atomic_store(&d->slots[i].pid, 0);
        alive |= atomic_load(&d->slots[i].pid) != 0;
    }
    if (!alive) /* no member lives: this one is the first again, its budget the group's */
        memcpy(d->caps, caps, sizeof(d->caps));
    for (int i = 0; i < GROUP_MEMBERS && !g->me; i++) {
        slot *s = &d->slots[i];
        if (atomic_load(&s->pid))
            continue;
        memset((char *)s + offsetof(slot, start_time), 0, sizeof(*s) - offsetof(slot, start_time));
        atomic_store(&s->ending, 0);
        s->start_time = stats_start_time((int)getpid());
        int cfd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
        ssize_t k = cfd >= 0 ? read(cfd, s->comm, sizeof(s->comm) - 1) : 0;
        if (cfd >= 0)
            close(cfd);
        s->comm[k > 0 ? k - 1 : 0] = '\0';
        atomic_store(&s->pid, (int32_t)getpid());
        g->me = s;
    }
    unlock(d);
    if (!g->me) {
        *why = "the group has 64 members already";
        munmap(d, sizeof(group_data));
        free(g);
        return NULL;
    }
    memcpy(caps, d->caps, sizeof(d->caps));
    return g;
}

const char *group_where(const group *g, const char **passed)
{
    *passed = g->passed;
    return g->where;
}

void group_leave(group *g)
{
    if (!g)
        return;
    /* Under the lock, and the mapping kept to the end of the process:
     * another thread of it may hold the lock now, and the kernel releases
     * a lock its holder left at exit only through a mapping still there. */
    lock(g->d);
    atomic_store(&g->left, true);
    /* A member that still holds memory keeps its slot, marked ending,
     * until its process is gone (reaped): the device is not free of it
     * before, and the others wait for an ending member. */
    bool holds = false;
    for (int dev = 0; dev < STATS_MAX_DEVICES; dev++)
        holds |= atomic_load(&g->me->held[dev]) != 0;
    atomic_store(&g->me->wait_seq, 0);
    atomic_store(&g->me->wait_taking, 0);
    if (holds)
        atomic_store(&g->me->ending, 1);
    else
        atomic_store(&g->me->pid, 0);
    unlock(g->d);
}

void group_forget(group *g)
{
    if (!g)
        return;
    munmap(g->d, sizeof(group_data));
    free(g);
}

/* Fills v (its name set) from the segment, reaping dead members. */
static void view_of(group_data *d, group_view *v)
{
    lock(d);
    reap_locked(d);
    memcpy(v->caps, d->caps, sizeof(v->caps));
    for (int i = 0; i < GROUP_MEMBERS; i++) {
        slot *s = &d->slots[i];
        if (!atomic_load(&s->pid))
            continue;
        group_member_view *m = &v->members[v->nmembers++];
        m->pid = atomic_load(&s->pid);
        m->ending = atomic_load(&s->ending) != 0;
        m->wait_seq = atomic_load(&s->wait_seq);
        m->wait_dev = atomic_load(&s->wait_dev);
        m->wait_taking = atomic_load(&s->wait_taking) != 0;
        m->wait_bytes = atomic_load(&s->wait_bytes);
        m->wait_since_ns = atomic_load(&s->wait_since_ns);
        memcpy(m->comm, s->comm, sizeof(m->comm));
        m->comm[sizeof(m->comm) - 1] = '\0';
        for (int k = 0; k < STATS_MAX_DEVICES; k++) {
            m->held[k] = atomic_load(&s->held[k]);
            m->cached[k] = atomic_load(&s->cached[k]);
        }
    }
    unlock(d);
}

int group_read(const char *name, group_view *v)
{
    memset(v, 0, sizeof(*v));
    if (!group_name_ok(name))
        return -EINVAL;
    snprintf(v->name, sizeof(v->name), "%s", name);
    int err;
    const char *why;
    place pl;
    group_data *d = segment_map(name, false, NULL, &pl, &err, &why);
    if (!d)
        return err;
    view_of(d, v);
    munmap(d, sizeof(group_data));
    return 0;
}

void group_view_of(group *g, const char *name, group_view *v)
{
    memset(v, 0, sizeof(*v));
    snprintf(v->name, sizeof(v->name), "%s", name);
    view_of(g->d, v);
}
