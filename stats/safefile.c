/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safefile.c - see safefile.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safefile.h"

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

int safefile_open(const char *path, int flags, const char **why)
{
    int fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600);
    if (fd < 0) {
        *why = errno == ELOOP ? "it is a symbolic link" : strerror(errno);
        return -1;
    }
    if ((*why = safefile_refusal(fd, geteuid())) != NULL) {
        close(fd);
        return -1;
    }
    return fd;
}

const char *safefile_dir_refusal(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return strerror(errno);
    if (!S_ISDIR(st.st_mode))
        return "it is not a directory";
    if (st.st_uid != 0 && st.st_uid != geteuid())
        return "it belongs to another user, who could move cupool's files";
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
        return "others may write in it and it is not sticky (chmod +t), so they "
               "could replace cupool's files";
    return NULL;
}
