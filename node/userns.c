/* SPDX-License-Identifier: Apache-2.0 */
/*
 * userns.c - see userns.h. Everything is read from /proc each time: the
 * tools ask once or twice per process named, and a cached answer could
 * outlive the process it was about.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "userns.h"

/* The initial user namespace's inode (the kernel's PROC_USER_INIT_INO, the
 * same since Linux 3.8): a namespace made with a full identity map has the
 * initial map, but not this inode. */
#define USERNS_INIT_INO 0xEFFFFFFDul

/* One number of a uid_map line from *p (before end), blanks before it
 * skipped: 0 with *v and *p past it, or -1. */
static int map_number_parse(const char **p, const char *end, uint32_t *v)
{
    const char *c = *p;
    while (c < end && (*c == ' ' || *c == '\t'))
        c++;
    const char *digits = c;
    uint64_t n = 0;
    for (; c < end && *c >= '0' && *c <= '9' && n <= UINT32_MAX; c++)
        n = n * 10 + (uint64_t)(*c - '0');
    if (c == digits || n > UINT32_MAX)
        return -1;
    *v = (uint32_t)n;
    *p = c;
    return 0;
}

/* The line from line to end (its newline left out) as map's next range:
 * 0 or -EINVAL. */
static int map_range_parse(const char *line, const char *end, userns_map *map)
{
    uint32_t v[3];
    for (int k = 0; k < 3; k++)
        if (map_number_parse(&line, end, &v[k]))
            return -EINVAL;
    while (line < end && (*line == ' ' || *line == '\t'))
        line++;
    /* As the kernel takes them: no range reaches (uid_t)-1, never an id. */
    if (line != end || v[2] == 0 || (uint64_t)v[0] + v[2] > UINT32_MAX ||
        (uint64_t)v[1] + v[2] > UINT32_MAX || map->n == USERNS_MAP_RANGES)
        return -EINVAL;
    map->range[map->n].inside = v[0];
    map->range[map->n].outside = v[1];
    map->range[map->n].count = v[2];
    map->n++;
    return 0;
}

int userns_map_parse(const char *text, userns_map *map)
{
    map->n = 0;
    while (*text) {
        const char *nl = strchr(text, '\n');
        const char *end = nl ? nl : text + strlen(text);
        if (map_range_parse(text, end, map))
            return -EINVAL;
        text = nl ? nl + 1 : end;
    }
    return 0;
}

int64_t userns_map_outside(const userns_map *map, uint32_t inside)
{
    for (int i = 0; i < map->n; i++)
        if (inside >= map->range[i].inside &&
            inside - map->range[i].inside < map->range[i].count)
            return (int64_t)map->range[i].outside + (inside - map->range[i].inside);
    return -1;
}

bool userns_map_is_initial(const userns_map *map)
{
    return map->n == 1 && map->range[0].inside == 0 && map->range[0].outside == 0 &&
           map->range[0].count == UINT32_MAX;
}

/* Up to len - 1 bytes of the file at path into buf, NUL-terminated: how
 * many, or -errno. */
static ssize_t small_file_read(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t got = 0;
    ssize_t n = 1;
    while (got + 1 < len && (n = read(fd, buf + got, len - 1 - got)) > 0)
        got += (size_t)n;
    int err = errno;
    close(fd);
    buf[got] = '\0';
    return n < 0 ? -err : (ssize_t)got;
}

/* The caller's own uid_map. A kernel without user namespaces has none:
 * the initial map then. One that cannot be read or parsed: a map of
 * nothing, so that no one is taken for the caller. */
static void self_map_read(userns_map *map)
{
    char text[USERNS_MAP_RANGES * 34 + 1]; /* "%10u %10u %10u\n" a line */
    ssize_t n = small_file_read("/proc/self/uid_map", text, sizeof(text));
    if (n == -ENOENT)
        n = snprintf(text, sizeof(text), "0 0 4294967295\n");
    if (n < 0 || userns_map_parse(text, map))
        map->n = 0;
}

/* Whether the caller runs in the initial user namespace (map: its own). */
static bool self_is_initial(const userns_map *map)
{
    struct stat st;
    if (!userns_map_is_initial(map))
        return false;
    if (stat("/proc/self/ns/user", &st) != 0)
        return errno == ENOENT; /* a kernel without user namespaces */
    return st.st_ino == USERNS_INIT_INO;
}

/* pid's real and effective uids as this namespace reads them: 0, or -1 if
 * it is gone (or /proc cannot tell). */
static int proc_uids_read(int pid, uint32_t ids[2])
{
    char path[64], text[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    if (small_file_read(path, text, sizeof(text)) < 0)
        return -1;
    const char *line = strstr(text, "\nUid:");
    unsigned r, e;
    if (!line || sscanf(line + 5, "%u %u", &r, &e) != 2)
        return -1;
    ids[0] = r;
    ids[1] = e;
    return 0;
}

/* What an id the namespace does not map reads as (kernel.overflowuid). */
static uint32_t overflow_uid(void)
{
    char text[32];
    if (small_file_read("/proc/sys/kernel/overflowuid", text, sizeof(text)) <= 0)
        return 65534;
    return (uint32_t)strtoul(text, NULL, 10);
}

userns_whose userns_process_whose(int pid, uint32_t *owner)
{
    userns_map map;
    uint32_t ids[2];
    if (proc_uids_read(pid, ids))
        return USERNS_GONE;
    self_map_read(&map);
    bool initial = self_is_initial(&map);
    uint32_t overflow = initial ? 0 : overflow_uid();
    int64_t me = userns_map_outside(&map, (uint32_t)geteuid());
    for (int k = 0; k < 2; k++) {
        /* Inside a namespace the overflow uid may be any unmapped user. */
        int64_t out = !initial && ids[k] == overflow ? -1 : userns_map_outside(&map, ids[k]);
        if (out >= 0 && out == me)
            continue;
        *owner = out >= 0 ? (uint32_t)out : ids[k];
        return out < 0 ? USERNS_UNMAPPED : USERNS_OTHERS;
    }
    return USERNS_MINE;
}

bool userns_caller_is_root(void)
{
    userns_map map;
    if (geteuid() != 0)
        return false;
    self_map_read(&map);
    return self_is_initial(&map);
}
