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

/* Opens path for writing (flags: O_WRONLY or O_RDWR, with O_APPEND and
 * O_CREAT as wanted; O_TRUNC is ignored; mode 0600 when created): never
 * through a link at its name, nor through a link on its path that another
 * user owns or could have put there (each directory is opened relative to
 * the one before), never blocking on a FIFO, never as a controlling
 * terminal, and only a file safefile_stat_refusal accepts for this user. A file
 * made here is new (O_EXCL); one there already is judged at its name
 * before it is opened (without O_APPEND) and again after. That narrows,
 * but cannot close, the window a name others may swap leaves (a link made
 * and removed between the calls): files cupool writes by name go through
 * safefile_replace and safefile_append, which never write an inode that
 * had the name. Returns the descriptor, or -1 with *why saying why (a
 * static string or strerror's). */
int safefile_open(const char *path, int flags, const char **why);

/* Appends len bytes of buf to the file at path, for any number of
 * processes appending together, without ever writing an inode that had
 * the name: the file there (judged as safefile_open judges it) is opened
 * read-only and locked (flock, against the other appenders), and a new
 * file holding its bytes and then buf takes its name (renamed into place,
 * as safefile_replace does). No file reached through a name another user
 * links and removes in a loop is ever written: at worst its bytes are
 * copied into this user's new file, mode 0600. A missing file is made
 * (O_EXCL). 0, or -1 with *why. */
int safefile_append(const char *path, const void *buf, size_t len, const char **why);

/* Makes a new file (mode 0600) to take path's name, for writing from its
 * start: made under a temporary name in the same directory (O_EXCL),
 * locked (flock LOCK_EX, for the descriptor's life) and renamed into
 * place, so that no file that had the name, nor any other name of it, is
 * ever truncated or written. Refused, as safefile_open refuses, where the
 * path has a link another user chose, or the name is a link, not a
 * regular file, another user's or one with two names; and where the file
 * there is locked by another writer (a parent recording to it). Returns
 * the descriptor (O_WRONLY, non-blocking), or -1 with *why. */
int safefile_replace(const char *path, const char **why);

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
