/* SPDX-License-Identifier: Apache-2.0 */
/*
 * safefile.h - one check for every file cupool writes or trusts.
 *
 * cupool runs inside other users' programs on shared machines, so a file it
 * writes (a trace, a statistics dump, a live page) must be the user's own:
 * never reached through a symbolic link, never a device or FIFO (which
 * could block or swallow writes), never another user's, and never a second
 * name of one of the user's own files (a hard link another user planted,
 * where fs.protected_hardlinks is off, would make cupool truncate or append
 * to the file it points at). Directories cupool keeps its files in must be
 * safe from renames by others: owned by root or the user, and sticky when
 * others may write in them.
 */
#ifndef CUPOOL_STATS_SAFEFILE_H
#define CUPOOL_STATS_SAFEFILE_H

#include <stdbool.h>
#include <sys/types.h>

struct stat;

/* Why the file st describes (from lstat or fstat) cannot be written as
 * owner's: a link, not a regular file, another user's, or one with more
 * than one name. NULL if it can. */
const char *safefile_stat_refusal(const struct stat *st, uid_t owner);

/* Why the open file fd cannot be written as owner's (a regular file owned
 * by owner with one link), or NULL if it can. */
const char *safefile_refusal(int fd, uid_t owner);

/* Opens path for writing (flags: O_WRONLY or O_RDWR, with O_APPEND and
 * O_CREAT as wanted; mode 0600 when created): never through a link at its
 * name, nor through a link on its path that another user owns or could
 * have put there (each directory is opened relative to the one before),
 * never blocking on a FIFO, never as a controlling terminal, and only a
 * file safefile_refusal accepts for this user. Nothing is truncated here.
 * Returns the descriptor, or -1 with *why saying why (a static string or
 * strerror's). */
int safefile_open(const char *path, int flags, const char **why);

/* Why safefile_open would refuse path, found without opening anything:
 * a link on its path, or a file at its name it would not write. NULL if
 * it would not (a missing name included: the open says what is missing). */
const char *safefile_path_refusal(const char *path);

/* Opens the directory at path, walked as safefile_open walks a path, if
 * it can hold this user's files (as safefile_dir_refusal): an O_PATH
 * descriptor (for the *at calls), or -errno (-EPERM for a refusal) with
 * *why. */
int safefile_dir_open(const char *path, const char **why);

/* Why the directory at path cannot hold this user's files (not a
 * directory, another user's, writable by others without the sticky bit),
 * or NULL if it can. */
const char *safefile_dir_refusal(const char *path);

#endif
