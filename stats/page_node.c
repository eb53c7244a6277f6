/* SPDX-License-Identifier: Apache-2.0 */
/*
 * page_node.c - a page read as the node's reader reads it
 * (stats_page_read_node, stats.h): found through another mount namespace,
 * its process named by the reader's pid and by its own namespace's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "page_internal.h"

/* Whether process pid maps the file with device dev and inode ino at addr
 * (the page's own claim, proven by the kernel: /proc/PID/map_files links
 * each mapping to its file): 1 or 0; -1 if map_files cannot be followed
 * (it takes CAP_SYS_ADMIN: root only), which leaves maps_file to judge. */
static int maps_file_at(int pid, uint64_t addr, dev_t dev, ino_t ino)
{
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t end = addr + ((sizeof(page_data) + (size_t)pg - 1) / (size_t)pg) * (size_t)pg;
    char path[96];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d/map_files/%lx-%lx", pid, (unsigned long)addr,
             (unsigned long)end);
    if (!addr || stat(path, &st) != 0)
        return !addr || errno == EPERM || errno == EACCES ? -1 : 0;
    return st.st_dev == dev && st.st_ino == ino;
}

int stats_page_read_node(int dfd, const char *name, int proc_pid, int page_pid, uid_t owner,
                         stats_view *v)
{
    int f = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0)
        return -ENOENT;
    struct stat st;
    page_data h;
    int err = 0, mapped = 0;
    uint64_t start;
    if (!page_file_ok(f, owner, &st))
        err = -EPERM;
    else if (!page_pread_all(f, &h, offsetof(page_data, asked), 0) || h.magic != PAGE_MAGIC ||
             h.version != PAGE_VERSION || h.size != sizeof(page_data) || h.pid != page_pid)
        err = -EPROTO;
    else if (!(start = stats_start_time(proc_pid)) || (h.start_time && start != h.start_time))
        err = -ESRCH;
    else if ((mapped = maps_file_at(proc_pid, h.map_addr, st.st_dev, st.st_ino)) < 0)
        mapped = page_maps_file(proc_pid, st.st_dev, st.st_ino);
    if (!err && mapped != 1)
        err = -ESRCH; /* the process must map this very file */
    if (!err)
        err = page_read_view(f, v);
    close(f);
    return err;
}

