/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safefile.c - see safefile.h.
 *
 * A path is walked one name at a time, each directory opened (O_PATH,
 * O_NOFOLLOW) relative to the one before, so that nothing on the way is
 * resolved by the kernel behind the checks. A symbolic link on the way is
 * followed by hand, its target walked the same way, and only where no
 * other user chose it: the link is the user's or root's, in a directory
 * others cannot change. Another user's /tmp/t/traces -> /home/victim would
 * otherwise send /tmp/t/traces/run.trace into the victim's home
 * (fs.protected_symlinks guards sticky directories only, and may be off).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "safefile.h"

enum { WALK_LINKS_MAX = 40 }; /* links followed on one path, as the kernel's */

/* A walk along a path: the directory reached (O_PATH), what is left. */
typedef struct walk {
    int dfd;
    int links;
    char left[PATH_MAX];
} walk;

const char *safefile_stat_refusal(const struct stat *st, uid_t owner)
{
    if (S_ISLNK(st->st_mode))
        return "it is a symbolic link";
    if (!S_ISREG(st->st_mode))
        return "it is not a regular file (a device, FIFO or socket)";
    if (st->st_uid != owner)
        return "it belongs to another user";
    if (st->st_nlink > 1)
        return "it has other names (hard links), which another user may have made";
    return NULL;
}

/* Why the directory st describes cannot hold this user's files, or NULL. */
static const char *dir_stat_refusal(const struct stat *st)
{
    if (!S_ISDIR(st->st_mode))
        return "it is not a directory";
    if (st->st_uid != 0 && st->st_uid != geteuid())
        return "it belongs to another user, who could move cupool's files";
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX))
        return "others may write in it and it is not sticky (chmod +t), so they "
               "could replace cupool's files";
    return NULL;
}

/* Why the symbolic link open at link (O_PATH), in directory dfd, must not
 * be followed, or NULL: only a link of the user or root, in a directory
 * no other user can change, was not chosen by another user. */
static const char *link_refusal(int dfd, int link)
{
    struct stat ls, ds;
    if (fstat(link, &ls) || fstat(dfd, &ds))
        return strerror(errno);
    if (ls.st_uid != geteuid() && ls.st_uid != 0)
        return "a symbolic link on its path belongs to another user, who could point "
               "it anywhere";
    if (dir_stat_refusal(&ds))
        return "a symbolic link on its path is in a directory another user may change "
               "(theirs, or writable by others and not sticky)";
    return NULL;
}

/* Puts the target of the link open at link in place of the name just
 * walked: what is left becomes target + rest (rest, inside w->left, is
 * "" or starts with '/'), from / for an absolute target, else from the
 * directory holding the link. 0 or -errno. */
static int walk_splice(walk *w, int link, const char *rest)
{
    char target[PATH_MAX], joined[PATH_MAX];
    ssize_t n = readlinkat(link, "", target, sizeof(target) - 1);
    if (n <= 0)
        return n ? -errno : -ENOENT;
    target[n] = '\0';
    if (snprintf(joined, sizeof(joined), "%s%s", target, rest) >= (int)sizeof(joined))
        return -ENAMETOOLONG;
    if (target[0] == '/') {
        int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (root < 0)
            return -errno;
        close(w->dfd);
        w->dfd = root;
    }
    memcpy(w->left, joined, strlen(joined) + 1);
    return 0;
}

/* Takes the walk one name further (rest: what follows it in w->left):
 * 0 (into a directory), 1 (a link's target now starts w->left), or
 * -errno, with *why for a link refused. */
static int walk_step(walk *w, const char *name, const char *rest, const char **why)
{
    if (!strcmp(name, "."))
        return 0;
    int fd = openat(w->dfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) {
        int err = -errno;
        if (fd >= 0)
            close(fd);
        return err;
    }
    if (S_ISDIR(st.st_mode)) {
        close(w->dfd);
        w->dfd = fd;
        return 0;
    }
    int err = -ENOTDIR;
    if (S_ISLNK(st.st_mode) && ++w->links > WALK_LINKS_MAX)
        err = -ELOOP;
    else if (S_ISLNK(st.st_mode) && (*why = link_refusal(w->dfd, fd)))
        err = -EPERM;
    else if (S_ISLNK(st.st_mode) && !(err = walk_splice(w, fd, rest)))
        err = 1;
    close(fd);
    return err;
}

/* Opens the directory path names (O_PATH), every name on the way walked
 * by walk_step: its descriptor, or -errno with *why (a refusal's reason,
 * else strerror's). */
static int walk_dirs(const char *path, const char **why)
{
    walk w = {.links = 0};
    *why = NULL;
    if (!*path || strlen(path) >= sizeof(w.left)) {
        *why = strerror(*path ? ENAMETOOLONG : ENOENT);
        return *path ? -ENAMETOOLONG : -ENOENT;
    }
    memcpy(w.left, path, strlen(path) + 1);
    w.dfd = open(path[0] == '/' ? "/" : ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    int err = w.dfd < 0 ? -errno : 0;
    char name[NAME_MAX + 1];
    for (char *p = w.left; !err && *(p += strspn(p, "/"));) {
        size_t n = strcspn(p, "/");
        if (n > NAME_MAX) {
            err = -ENAMETOOLONG;
            break;
        }
        memcpy(name, p, n);
        name[n] = '\0';
        p += n;
        err = walk_step(&w, name, p, why);
        if (err == 1) /* a link: its target is walked from the start of left */
            p = w.left, err = 0;
    }
    if (err && w.dfd >= 0)
        close(w.dfd);
    if (err && !*why)
        *why = strerror(-err);
    return err ? err : w.dfd;
}

/* Opens the directory holding path's last name (O_PATH, walked as
 * walk_dirs does) and points *name at that name, inside path: the
 * descriptor, or -errno with *why. */
static int parent_open(const char *path, const char **name, const char **why)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    *name = slash ? slash + 1 : path;
    if (!**name) {
        *why = strerror(*path ? EISDIR : ENOENT);
        return *path ? -EISDIR : -ENOENT;
    }
    size_t n = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof(dir)) {
        *why = strerror(ENAMETOOLONG);
        return -ENAMETOOLONG;
    }
    memcpy(dir, slash ? path : ".", slash ? n : 1);
    dir[slash ? n : 1] = '\0';
    return walk_dirs(dir, why);
}

/* Opens name in dfd, which must be the one regular file st describes
 * (found there by fstatat before): never created, never truncated, never
 * appended to (flags' O_APPEND is set after). The file opened must be st's
 * inode, still with one name: then the name named it alone at the
 * fstatat, which another user's second name of a victim's file (which
 * has its own name too) never does, however it comes and goes between
 * the calls. The descriptor, or -1 with *why (-ENOENT: the name was gone
 * at the open). */
static int open_existing(int dfd, const char *name, int flags, const struct stat *st,
                         const char **why)
{
    int fd = openat(dfd, name, (flags & ~(O_CREAT | O_EXCL | O_TRUNC | O_APPEND)) |
                    O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        *why = err == ELOOP ? "it is a symbolic link" : strerror(err);
        return err == ENOENT ? -ENOENT : -1;
    }
    struct stat now;
    if (fstat(fd, &now))
        *why = strerror(errno);
    else if (now.st_dev != st->st_dev || now.st_ino != st->st_ino)
        *why = "it was replaced while it was opened (another user may be swapping its name)";
    else
        *why = safefile_stat_refusal(&now, geteuid());
    if (!*why && (flags & O_APPEND) && fcntl(fd, F_SETFL, O_APPEND | O_NONBLOCK))
        *why = strerror(errno);
    if (*why) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Opens (or with O_CREAT, makes) name in dfd as safefile_open says. A
 * file made here is new (O_EXCL): nobody else's, no other name. One there
 * already is judged before it is opened and after (open_existing). */
static int open_in(int dfd, const char *name, int flags, const char **why)
{
    for (int tries = 0; tries < 8; tries++) {
        if (flags & O_CREAT) {
            int fd = openat(dfd, name, (flags & ~O_TRUNC) | O_EXCL | O_NOFOLLOW | O_NONBLOCK |
                            O_NOCTTY | O_CLOEXEC, 0600);
            if (fd >= 0 || errno != EEXIST) {
                *why = fd >= 0 ? NULL : errno == ELOOP ? "it is a symbolic link" : strerror(errno);
                return fd;
            }
        }
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW)) {
            if (errno == ENOENT && (flags & O_CREAT))
                continue; /* removed since: make it */
            *why = strerror(errno);
            return -1;
        }
        if ((*why = safefile_stat_refusal(&st, geteuid())) != NULL)
            return -1;
        int fd = open_existing(dfd, name, flags, &st, why);
        if (fd != -ENOENT || !(flags & O_CREAT))
            return fd < 0 ? -1 : fd;
    }
    *why = "its name kept changing while it was opened (another user may be swapping it)";
    return -1;
}

int safefile_open(const char *path, int flags, const char **why)
{
    const char *name;
    int dfd = parent_open(path, &name, why);
    if (dfd < 0)
        return -1;
    int fd = open_in(dfd, name, flags, why);
    close(dfd);
    return fd;
}

/* Whether the file at name in dfd is held (flock LOCK_EX) by another
 * open file: opened read-only to ask (a regular file only, checked
 * before and after: nothing is written). */
static bool held_by_another(int dfd, const char *name)
{
    struct stat st;
    if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
        return false;
    const char *why;
    int fd = open_existing(dfd, name, O_RDONLY, &st, &why);
    if (fd < 0)
        return false;
    bool held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return held;
}

/* Makes a new file, mode 0600, under a temporary name beside name in dfd
 * (".NAME.XXXXXXXX", random): its descriptor, with tmp its name, or -1. */
static int make_temporary(int dfd, const char *name, char *tmp, size_t len)
{
    for (int tries = 0; tries < 16; tries++) {
        uint32_t r;
        if (getrandom(&r, sizeof(r), 0) != sizeof(r))
            return -1;
        if (snprintf(tmp, len, ".%.200s.%08x", name, (unsigned)r) >= (int)len) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK |
                        O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST)
            return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Copies what fd holds, from its start, to out: 0 or -errno. */
static int copy_all(int fd, int out)
{
    char b[8192]; /* (a helper thread's stack) */
    for (;;) {
        ssize_t n = read(fd, b, sizeof(b));
        if (n == 0)
            return 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || write(out, b, (size_t)n) != n)
            return n < 0 ? -errno : -EIO;
    }
}

/* Takes the file at name in dfd, which st describes, for an append: opened
 * read-only (nothing written), locked against other appenders (up to 5 s:
 * a lock held longer is not an appender's) and still the file at the name
 * once locked. The descriptor; -EAGAIN when the name moved on (try
 * again); or -1 with *why. */
static int take_old(int dfd, const char *name, const struct stat *st, const char **why)
{
    int fd = open_existing(dfd, name, O_RDONLY, st, why);
    if (fd < 0)
        return fd == -ENOENT ? -EAGAIN : -1;
    for (int i = 0; flock(fd, LOCK_EX | LOCK_NB); i++)
        if (errno != EWOULDBLOCK || i == 500) {
            *why = errno != EWOULDBLOCK ? strerror(errno) : "another process held it locked "
                   "for 5 s";
            close(fd);
            return -1;
        }
        else
            nanosleep(&(struct timespec){0, 10000000L}, NULL);
    struct stat now;
    if (fstatat(dfd, name, &now, AT_SYMLINK_NOFOLLOW) || now.st_ino != st->st_ino ||
        now.st_dev != st->st_dev) {
        close(fd);
        return -EAGAIN;
    }
    return fd;
}

/* A new file at name in dfd holding what old holds (none: nothing) and
 * then len bytes of buf, renamed into place: 0, or -1 with *why. */
static int write_new(int dfd, const char *name, int old, const void *buf, size_t len,
                     const char **why)
{
    char tmp[NAME_MAX + 1];
    int fd = make_temporary(dfd, name, tmp, sizeof(tmp)), err = 0;
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    if (old >= 0)
        err = copy_all(old, fd);
    if (!err && write(fd, buf, len) != (ssize_t)len)
        err = errno ? -errno : -EIO;
    if (!err && renameat(dfd, tmp, dfd, name))
        err = -errno;
    close(fd);
    if (err) {
        unlinkat(dfd, tmp, 0);
        *why = strerror(-err);
        return -1;
    }
    return 0;
}

static int append_in(int dfd, const char *name, const void *buf, size_t len, const char **why)
{
    for (int tries = 0; tries < 64; tries++) {
        struct stat st;
        if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW)) {
            if (errno != ENOENT) {
                *why = strerror(errno);
                return -1;
            }
            int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            0600);
            if (fd < 0 && errno == EEXIST)
                continue;
            ssize_t w = fd < 0 ? -1 : write(fd, buf, len);
            *why = fd < 0 ? strerror(errno) : w != (ssize_t)len ? "short write" : NULL;
            if (fd >= 0)
                close(fd);
            return *why ? -1 : 0;
        }
        if ((*why = safefile_stat_refusal(&st, geteuid())) != NULL)
            return -1;
        int old = take_old(dfd, name, &st, why);
        if (old == -EAGAIN)
            continue;
        if (old < 0)
            return -1;
        int r = write_new(dfd, name, old, buf, len, why);
        close(old);
        return r;
    }
    *why = "its name kept changing while it was written (another user may be swapping it)";
    return -1;
}

int safefile_append(const char *path, const void *buf, size_t len, const char **why)
{
    const char *name;
    int dfd = parent_open(path, &name, why);
    if (dfd < 0)
        return -1;
    int r = append_in(dfd, name, buf, len, why);
    close(dfd);
    return r;
}

/* safefile_replace in dfd: the new file's descriptor, or -1 with *why. */
static int replace_in(int dfd, const char *name, const char **why)
{
    struct stat st;
    *why = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) ? NULL /* nothing there */
           : safefile_stat_refusal(&st, geteuid());
    if (!*why && held_by_another(dfd, name))
        *why = "another process writes to it (holds it locked)";
    if (*why)
        return -1;
    char tmp[NAME_MAX + 1];
    int fd = make_temporary(dfd, name, tmp, sizeof(tmp));
    if (fd < 0) {
        *why = strerror(errno);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) || renameat(dfd, tmp, dfd, name)) {
        *why = strerror(errno);
        unlinkat(dfd, tmp, 0);
        close(fd);
        return -1;
    }
    return fd;
}

int safefile_replace(const char *path, const char **why)
{
    const char *name;
    int dfd = parent_open(path, &name, why);
    if (dfd < 0)
        return -1;
    int fd = replace_in(dfd, name, why);
    close(dfd);
    return fd;
}

const char *safefile_path_refusal(const char *path)
{
    const char *name, *why;
    int dfd = parent_open(path, &name, &why);
    if (dfd == -ENOENT)
        return NULL; /* nothing there yet: the open says what is missing */
    if (dfd < 0)
        return why;
    struct stat st;
    int r = fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW), err = errno;
    close(dfd);
    if (r)
        return err == ENOENT ? NULL : strerror(err);
    return safefile_stat_refusal(&st, geteuid());
}

int safefile_dir_open(const char *path, const char **why)
{
    int fd = walk_dirs(path, why);
    if (fd < 0)
        return fd;
    struct stat st;
    if ((*why = fstat(fd, &st) ? strerror(errno) : dir_stat_refusal(&st))) {
        close(fd);
        return -EPERM;
    }
    return fd;
}

const char *safefile_dir_refusal(const char *path)
{
    struct stat st;
    return stat(path, &st) != 0 ? strerror(errno) : dir_stat_refusal(&st);
}
