/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.c - see node.h.
 *
 * The scan starts from what the kernel says runs: one pass over /proc,
 * each process the reader may look at, its /proc/PID/maps read for a
 * mapping of a file named as a page (.../cupool-<uid>[.XXXXXX]/<pid
 * namespace>-<pid>) whose name is that very process's (its pid namespace's
 * inode and NSpid's last field). The file is then opened where its process
 * sees it, /proc/PID/root and the mapped path, a component at a time
 * following no link (or, where that path does not lead to it, through
 * /proc/PID/map_files, which root may follow), and must be the file mapped:
 * the device and inode the maps line gives. No directory is listed: files
 * or directories another user makes, of any name and number, are never
 * read, and a scan's cost grows with the processes on the node and their
 * mappings alone.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "node.h"
#include "proclabels.h"

/* A mapping of a file named as a page, from one line of /proc/PID/maps. */
typedef struct node_map {
    unsigned long start, end;
    dev_t dev;
    ino_t ino;
    char path[512];      /* as the process sees it, from its own root */
    const char *name;    /* in path: the page's name, <namespace>-<pid> */
} node_map;

/* The inode in a namespace link's text ("pid:[4026531836]"), or 0. */
static unsigned long ns_inode(int pid, const char *ns)
{
    char path[64], text[64];
    snprintf(path, sizeof(path), "/proc/%d/ns/%s", pid, ns);
    ssize_t n = readlink(path, text, sizeof(text) - 1);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    const char *b = strchr(text, '[');
    return b ? strtoul(b + 1, NULL, 10) : 0;
}

/* pid's own pid namespace's pid: the last field of NSpid, or pid. */
static int own_pid(int pid)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *line = strstr(buf, "\nNSpid:");
    if (!line)
        return pid; /* a kernel without pid namespaces' NSpid */
    int last = 0;
    for (const char *s = line + 7; *s && *s != '\n';) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s)
            break;
        last = (int)v;
        s = end;
    }
    return last;
}

/* Whether s is all digits, and not empty. */
static bool digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return n > 0;
}

/* Whether a page name (<namespace>-<pid>) parses, into *ns and *pid. */
static bool page_name_parse(const char *name, unsigned long *ns, int *pid)
{
    const char *dash = strchr(name, '-');
    if (!dash || !digits(name, (size_t)(dash - name)) || !digits(dash + 1, strlen(dash + 1)))
        return false;
    *ns = strtoul(name, NULL, 10);
    long v = strtol(dash + 1, NULL, 10);
    *pid = (int)v;
    return v > 0 && v < (1L << 30);
}

/* Whether dir (the component before a page's name) is a user's page
 * directory: cupool-<uid> or cupool-<uid>.XXXXXX. */
static bool page_dir_name(const char *dir, size_t n)
{
    if (n < 8 || strncmp(dir, "cupool-", 7))
        return false;
    const char *dot = memchr(dir, '.', n);
    size_t uid = dot ? (size_t)(dot - dir) - 7 : n - 7;
    return digits(dir + 7, uid) && (!dot || (size_t)(dir + n - dot) == 7);
}

/* Parses one maps line into *m if it maps a file named as a page. */
static bool map_parse(const char *line, node_map *m)
{
    unsigned maj, min;
    unsigned long long ino;
    int at = 0;
    if (sscanf(line, "%lx-%lx %*s %*x %x:%x %llu %n", &m->start, &m->end, &maj, &min, &ino,
               &at) != 5 || !at || line[at] != '/')
        return false;
    size_t n = strlen(line + at);
    if (n >= sizeof(m->path))
        return false; /* a page's path is short; " (deleted)" ends no page */
    memcpy(m->path, line + at, n + 1);
    char *slash = strrchr(m->path, '/');
    if (slash == m->path)
        return false;
    *slash = '\0';
    char *up = strrchr(m->path, '/');
    *slash = '/';
    m->name = slash + 1;
    m->dev = makedev(maj, min);
    m->ino = (ino_t)ino;
    return page_dir_name(up + 1, (size_t)(slash - up - 1));
}

/* Opens dir (absolute) under root, a component at a time, following no
 * link: a directory descriptor, or -1. */
static int open_under(int root, const char *dir)
{
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", dir);
    int fd = dup(root);
    for (char *save = NULL, *c = strtok_r(copy, "/", &save); fd >= 0 && c;
         c = strtok_r(NULL, "/", &save)) {
        int next = openat(fd, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        fd = next;
    }
    return fd;
}

/* Opens the file m maps in process pid, as pid sees it (its root and the
 * mapped path) or, failing that, through map_files: a descriptor of that
 * very file (its device and inode), or -1. */
static int map_open(int pid, const node_map *m)
{
    char root[64], dir[512];
    snprintf(root, sizeof(root), "/proc/%d/root", pid);
    snprintf(dir, sizeof(dir), "%.*s", (int)(m->name - m->path), m->path);
    int r = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int d = r >= 0 ? open_under(r, dir) : -1;
    const int flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    int f = d >= 0 ? openat(d, m->name, flags) : -1;
    if (r >= 0)
        close(r);
    if (d >= 0)
        close(d);
    struct stat st;
    if (f >= 0 && fstat(f, &st) == 0 && st.st_dev == m->dev && st.st_ino == m->ino)
        return f;
    if (f >= 0)
        close(f);
    char via[96];
    snprintf(via, sizeof(via), "/proc/%d/map_files/%lx-%lx", pid, m->start, m->end);
    f = open(via, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f >= 0 && fstat(f, &st) == 0 && st.st_dev == m->dev && st.st_ino == m->ino)
        return f;
    if (f >= 0)
        close(f);
    return -1;
}

typedef struct map_want {
    int pid, nspid;      /* nspid: its own namespace's pid, 0 until read */
    unsigned long ns;    /* its pid namespace's inode */
    node_map *m;
    const char *const *dirs; /* where its page must lie, if ndirs */
    size_t ndirs;
} map_want;

/* Whether m's page lies in one of w's directories (any, where none is
 * named): its user directory's parent is one of them. */
static bool map_in_dirs(const map_want *w, const node_map *m)
{
    if (!w->ndirs)
        return true;
    const char *user = m->name - 1; /* the slash before the name */
    while (user > m->path && user[-1] != '/')
        user--;
    size_t len = user > m->path ? (size_t)(user - 1 - m->path) : 0;
    for (size_t i = 0; i < w->ndirs; i++) {
        size_t n = strlen(w->dirs[i]);
        while (n > 1 && w->dirs[i][n - 1] == '/')
            n--;
        if (n == len && !strncmp(w->dirs[i], m->path, n))
            return true;
    }
    return false;
}

/* Whether line maps a file named as w's process's own page (into w->m). A
 * file named as another process's page (a reader's request maps one for a
 * moment) is not its. */
static bool map_line_is_page(const char *line, void *arg)
{
    map_want *w = arg;
    unsigned long page_ns;
    int page_pid;
    if (!strstr(line, "/cupool-") || !map_parse(line, w->m) || !map_in_dirs(w, w->m) ||
        !page_name_parse(w->m->name, &page_ns, &page_pid) || page_ns != w->ns)
        return false;
    if (!w->nspid)
        w->nspid = own_pid(w->pid);
    return page_pid == w->nspid;
}

static enum node_skip skip_reason(int err)
{
    return err == -EPERM ? NODE_SKIP_foreign : err == -EPROTO ? NODE_SKIP_corrupt
           : err == -EAGAIN ? NODE_SKIP_busy : NODE_SKIP_gone;
}

static void label_proc(node_proc *p);

/* Appends p to s: 0 or -ENOMEM. */
static int scan_add(node_scan *s, const node_proc *p)
{
    /* Room doubles when nprocs reaches a power of two (from 8). */
    size_t n = s->nprocs;
    if (n >= 8 ? !(n & (n - 1)) : !n) {
        node_proc *grown = realloc(s->procs, (n ? 2 * n : 8) * sizeof(*grown));
        if (!grown)
            return -ENOMEM;
        s->procs = grown;
    }
    s->procs[s->nprocs++] = *p;
    return 0;
}

/* Reads the page of process pid (of user uid), if it maps one, into s:
 * 0 or -ENOMEM. */
static int scan_proc(node_scan *s, int pid, uid_t uid, const char *const *dirs, size_t ndirs)
{
    node_map m;
    map_want w = {pid, 0, ns_inode(pid, "pid"), &m, dirs, ndirs};
    if (!w.ns || stats_maps_find(pid, map_line_is_page, &w) != 1)
        return 0; /* gone, a kernel thread, or no page */
    node_proc p;
    memset(&p, 0, sizeof(p));
    int f = map_open(pid, &m), r = -ESRCH;
    if (f >= 0) {
        r = stats_page_read_mapped(f, pid, w.nspid, uid, &p.view);
        close(f);
    }
    if (r) {
        s->skipped[skip_reason(r)]++;
        return 0;
    }
    p.pid = p.view.pid = pid;
    p.uid = uid;
    label_proc(&p);
    return scan_add(s, &p);
}

static int by_pid(const void *a, const void *b)
{
    return ((const node_proc *)a)->pid - ((const node_proc *)b)->pid;
}

int node_scan_run(node_scan *s, const char *const *dirs, size_t ndirs)
{
    memset(s, 0, sizeof(*s));
    uid_t me = geteuid();
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int err = 0;
    for (struct dirent *e; !err && (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        int pid = atoi(e->d_name);
        char path[64];
        struct stat st;
        snprintf(path, sizeof(path), "/proc/%d", pid);
        if (pid > 0 && stat(path, &st) == 0 && (!me || st.st_uid == me))
            err = scan_proc(s, pid, st.st_uid, dirs, ndirs);
    }
    closedir(d);
    if (s->nprocs)
        qsort(s->procs, s->nprocs, sizeof(*s->procs), by_pid);
    return err;
}

void node_scan_free(node_scan *s)
{
    free(s->procs);
    memset(s, 0, sizeof(*s));
}

/* ---- labels ------------------------------------------------------------------- */

static void label_proc(node_proc *p)
{
    static uint32_t last_uid = UINT32_MAX; /* one user's processes come together */
    static char last_user[sizeof(p->user)];
    if (p->uid != last_uid) {
        struct passwd pw, *got = NULL;
        char pwbuf[1024];
        if (getpwuid_r(p->uid, &pw, pwbuf, sizeof(pwbuf), &got) == 0 && got)
            snprintf(last_user, sizeof(last_user), "%s", pw.pw_name);
        else
            snprintf(last_user, sizeof(last_user), "%u", (unsigned)p->uid);
        last_uid = p->uid;
    }
    snprintf(p->user, sizeof(p->user), "%s", last_user);
    static char env[1 << 18];
    proclabels_read(p->pid, p->uid, &p->vouched, &p->claimed, env, sizeof(env));
}

const char *node_skip_name(enum node_skip r)
{
    static const char *const names[] = {
#define NODE_X(name, help) #name,
        NODE_SKIP_REASONS(NODE_X)
#undef NODE_X
    };
    return names[r];
}
