/* SPDX-License-Identifier: Apache-2.0 */
/* gpus.c - see gpus.h. */
#include <ctype.h>
#include <dirent.h>
#include <stdbool.h>
#include <string.h>

#include "gpus.h"

/* Entries of dir whose name is prefix then digits only (prefix ""
 * counts every entry but "." and ".."). */
static int count_entries(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t k = strlen(prefix);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        const char *s = e->d_name;
        if (s[0] == '.' || strncmp(s, prefix, k))
            continue;
        bool digits = !k || isdigit((unsigned char)s[k]);
        for (const char *t = s + k; k && *t; t++)
            digits = digits && isdigit((unsigned char)*t);
        n += digits;
    }
    closedir(d);
    return n;
}

int node_gpus_count(void)
{
    int dev = count_entries("/dev", "nvidia");
    int proc = count_entries("/proc/driver/nvidia/gpus", "");
    return dev > proc ? dev : proc;
}
