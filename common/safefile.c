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
#include <sys/stat.h>
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

const char *safefile_refusal(int fd, uid_t owner)
{
    struct stat st;
    return fstat(fd, &st) != 0 ? strerror(errno) : safefile_stat_refusal(&st, owner);
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

int safefile_open(const char *path, int flags, const char **why)
{
    const char *name;
    int dfd = parent_open(path, &name, why);
    if (dfd < 0)
        return -1;
    int fd = openat(dfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
    int err = errno;
    close(dfd);
    if (fd < 0) {
        *why = err == ELOOP ? "it is a symbolic link" : strerror(err);
        return -1;
    }
    if ((*why = safefile_refusal(fd, geteuid())) != NULL) {
        close(fd);
        return -1;
    }
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
