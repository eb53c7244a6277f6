/* SPDX-License-Identifier: Apache-2.0 */
/*
 * page_internal.h - the live page's layout and the checks its readers
 * share: page.c (the writer, and readers by pid) and page_node.c (the
 * node's reader). Nothing else includes it.
 */
#ifndef CUPOOL_STATS_PAGE_INTERNAL_H
#define CUPOOL_STATS_PAGE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "stats.h"

#define PAGE_MAGIC 0x3345474150504f43ull /* "COPPAGE3" */
enum { PAGE_VERSION = 18 };

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
    uint64_t map_addr;         /* where its process maps it: a reader of
                                  the node checks /proc/PID/map_files there
                                  instead of reading all of its maps */
    _Atomic uint64_t asked[STATS_NREQUESTS];  /* raised by readers */
    _Atomic uint64_t served[STATS_NREQUESTS]; /* raised by the helper */
    _Atomic uint64_t paused_since, paused_needs; /* written by cupool pause */
    stats_nccl_ask nccl_ask;   /* written by a controller before it asks */
    _Atomic uint64_t seq;      /* odd while the writer writes */
    stats_view view;
    page_export exports[STATS_IPC_EXPORTS];
} page_data;

/* Whether process pid maps the file with device dev and inode ino: 1 or 0;
 * -1 if its maps cannot be read. */
int page_maps_file(int pid, dev_t dev, ino_t ino);
/* Whether the open candidate is a regular file of uid, 0600, one link, the
 * page's size (its stat into *st). */
bool page_file_ok(int fd, uid_t uid, struct stat *st);
/* pread of exactly len bytes. */
bool page_pread_all(int fd, void *buf, size_t len, off_t off);
/* Copies the view under the seqlock: 0, -EPROTO or -EAGAIN. */
int page_read_view(int fd, stats_view *v);

#endif
