/* SPDX-License-Identifier: Apache-2.0 */
/*
 * page_node.c - a page read as the node's reader reads it
 * (stats_page_read_mapped, stats.h): a file its process maps, found from
 * the process (node.c), its process named by the reader's pid and by its
 * own namespace's.
 */
#include <errno.h>
#include <stddef.h>
#include <sys/stat.h>

#include "page_internal.h"

int stats_page_read_mapped(int fd, int proc_pid, int page_pid, uid_t owner, stats_view *v)
{
    struct stat st;
    page_data h;
    uint64_t start;
    if (!page_file_ok(fd, owner, &st))
        return -EPERM;
    if (!page_pread_all(fd, &h, offsetof(page_data, asked), 0) || h.magic != PAGE_MAGIC ||
        h.version != PAGE_VERSION || h.size != sizeof(page_data) || h.pid != page_pid)
        return -EPROTO;
    if (!(start = stats_start_time(proc_pid)) || (h.start_time && start != h.start_time))
        return -ESRCH;
    return page_read_view(fd, v);
}
