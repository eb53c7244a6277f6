/* SPDX-License-Identifier: Apache-2.0 */
/*
 * userns.h - whose a process is, as the initial user namespace sees it,
 * for the tools that act on a process from outside (cupool stat, flush,
 * dump, pause and resume).
 *
 * Inside a user namespace (unshare -Ur, a rootless container) every id is
 * read through the namespace's uid_map: root there is an ordinary user
 * outside, and an id the map leaves out reads as the overflow uid
 * (65534), whoever it is. So ids are compared as seen outside the caller's
 * namespace, and root is trusted only in the initial one. Each map is one
 * to one, so ids equal outside the caller's namespace are equal in the
 * initial one too: nested namespaces need no more than the caller's map.
 */
#ifndef CUPOOL_STATS_USERNS_H
#define CUPOOL_STATS_USERNS_H

#include <stdbool.h>
#include <stdint.h>

enum { USERNS_MAP_RANGES = 340 }; /* the most uid_map lines the kernel takes */

/* One uid_map (/proc/PID/uid_map): in each range, ids inside .. inside +
 * count - 1 of the namespace are outside .. outside + count - 1 of its
 * parent. */
typedef struct userns_map {
    int n;
    struct { uint32_t inside, outside, count; } range[USERNS_MAP_RANGES];
} userns_map;

/* Parses the text of a uid_map, one "inside outside count" line per range.
 * 0, or -EINVAL: a line that is not three numbers, a count of 0, a range
 * that reaches 4294967295 ((uid_t)-1, never an id), more lines than the
 * kernel takes. No line at all parses: a map not written yet, which maps
 * nothing. */
int userns_map_parse(const char *text, userns_map *map);

/* The id outside that inside is, or -1 if map leaves inside unmapped. */
int64_t userns_map_outside(const userns_map *map, uint32_t inside);

/* Whether map is the initial namespace's: "0 0 4294967295" alone. */
bool userns_map_is_initial(const userns_map *map);

typedef enum userns_whose {
    USERNS_MINE,     /* its real and effective uids are the caller's */
    USERNS_OTHERS,   /* another user's */
    USERNS_UNMAPPED, /* a user the caller's namespace does not map: not the
                        caller, but which user cannot be told from here */
    USERNS_GONE      /* no such process */
} userns_whose;

/* Whose process pid is: its real and effective uids (/proc/PID/status)
 * against the caller's effective uid, all taken outside the caller's user
 * namespace. *owner: the first of pid's uids that is not the caller's
 * (outside; as read here when unmapped). Root gets no exception here:
 * see userns_caller_is_root. */
userns_whose userns_process_whose(int pid, uint32_t *owner);

/* Whether the caller is root of the initial user namespace, who may act
 * on any user's process; root of a namespace of its own is not. */
bool userns_caller_is_root(void);

#endif
