/* SPDX-License-Identifier: Apache-2.0 */
/*
 * node.c - see node.h.
 *
 * One pass over /proc notes each process's user and its mount and pid
 * namespaces. Each mount namespace's page directories are then listed
 * once, through /proc/REP/root of one of its processes; every directory
 * path is walked a component at a time without following links (a
 * container's /dev/shm that is a link is not followed into the reader's
 * own tree). A page's name, <pid namespace>-<pid>, is matched to the
 * process of that pid namespace whose own pid it is (NSpid in
 * /proc/PID/status); the page must be that process's, mapped by it.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node.h"

/* A process of the node, as the first pass saw it. */
typedef struct seen {
    int pid, nspid;        /* nspid: its own namespace's pid; 0 = unread */
    uid_t uid;
    unsigned long mnt, pidns;
} seen;

enum { MAX_USER_DIRS = 1024 };

typedef struct walk {
    seen *p;
    size_t n, cap;
    /* The user directories read: one mount namespace's may be another's
     * too (a shared /tmp, a bind mount), and is read once. */
    struct { dev_t dev; ino_t ino; } dirs[MAX_USER_DIRS];
    size_t ndirs;
} walk;

static const char *const default_dirs[] = {"/dev/shm", "/tmp"};

/* The inode in a namespace link's text ("mnt:[4026531840]"), or 0. */
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

/* Notes every process the reader may look at: root every one, a user
 * their own. 0 or -ENOMEM. */
static int walk_proc(walk *w)
{
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
        if (pid <= 0 || stat(path, &st) || (me && st.st_uid != me))
            continue;
        seen s = {pid, 0, st.st_uid, ns_inode(pid, "mnt"), ns_inode(pid, "pid")};
        if (!s.mnt || !s.pidns)
            continue; /* gone, or a kernel thread */
        if (w->n == w->cap) {
            size_t cap = w->cap ? 2 * w->cap : 256;
            seen *p = realloc(w->p, cap * sizeof(*p));
            if (!p) {
                err = -ENOMEM;
                break;
            }
            w->p = p, w->cap = cap;
        }
        w->p[w->n++] = s;
    }
    closedir(d);
    return err;
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

/* The process whose pid namespace is pidns and whose own pid there is
 * nspid, or NULL. */
static seen *find_owner(walk *w, unsigned long pidns, int nspid)
{
    for (size_t i = 0; i < w->n; i++) {
        seen *s = &w->p[i];
        if (s->pidns != pidns)
            continue;
        if (!s->nspid)
            s->nspid = own_pid(s->pid);
        if (s->nspid == nspid)
            return s;
    }
    return NULL;
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

/* Whether a page name (<namespace>-<pid>) parses, into *ns and *pid. */
static bool page_name_parse(const char *name, unsigned long *ns, int *pid)
{
    char *end;
    if (!isdigit((unsigned char)name[0]))
        return false;
    *ns = strtoul(name, &end, 10);
    if (*end != '-' || !isdigit((unsigned char)end[1]))
        return false;
    long v = strtol(end + 1, &end, 10);
    *pid = (int)v;
    return !*end && v > 0 && v < (1L << 30);
}

static enum node_skip skip_reason(int err)
{
    return err == -EPERM ? NODE_SKIP_foreign : err == -EPROTO ? NODE_SKIP_corrupt
           : err == -EAGAIN ? NODE_SKIP_busy : NODE_SKIP_gone;
}

static void label_proc(node_proc *p);

/* Reads the pages of one user directory (dfd) into s. */
static int scan_user_dir(node_scan *s, walk *w, int dfd)
{
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return 0;
    }
    int err = 0;
    for (struct dirent *e; !err && (e = readdir(d));) {
        unsigned long ns;
        int nspid;
        if (!page_name_parse(e->d_name, &ns, &nspid))
            continue; /* ".", "..", pages being made, anything else */
        seen *owner = find_owner(w, ns, nspid);
        if (!owner) {
            s->skipped[NODE_SKIP_unknown_pid]++;
            continue;
        }
        node_proc p;
        memset(&p, 0, sizeof(p));
        int r = stats_page_read_node(dirfd(d), e->d_name, owner->pid, nspid, owner->uid,
                                     &p.view);
        if (r) {
            s->skipped[skip_reason(r)]++;
            continue;
        }
        p.pid = p.view.pid = owner->pid;
        p.uid = owner->uid;
        label_proc(&p);
        /* Room doubles when nprocs reaches a power of two (from 8). */
        size_t n = s->nprocs;
        if (n >= 8 ? !(n & (n - 1)) : !n) {
            node_proc *grown = realloc(s->procs, (n ? 2 * n : 8) * sizeof(*grown));
            if (!grown) {
                err = -ENOMEM;
                break;
            }
            s->procs = grown;
        }
        s->procs[s->nprocs++] = p;
    }
    closedir(d);
    return err;
}

/* Reads every user directory (cupool-*) of one page directory. */
static int scan_page_dir(node_scan *s, walk *w, int base)
{
    DIR *d = fdopendir(base);
    if (!d) {
        close(base);
        return 0;
    }
    int err = 0;
    for (struct dirent *e; !err && (e = readdir(d));) {
        if (strncmp(e->d_name, "cupool-", 7))
            continue;
        int u = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (u < 0)
            continue;
        bool again = fstat(u, &st) != 0;
        for (size_t k = 0; !again && k < w->ndirs; k++)
            again = w->dirs[k].dev == st.st_dev && w->dirs[k].ino == st.st_ino;
        /* a user's own is 0700; one read already is not read again */
        if (again || (st.st_mode & 022) || w->ndirs == MAX_USER_DIRS) {
            close(u);
            continue;
        }
        w->dirs[w->ndirs].dev = st.st_dev;
        w->dirs[w->ndirs++].ino = st.st_ino;
        err = scan_user_dir(s, w, u);
    }
    closedir(d);
    return err;
}

static int by_pid(const void *a, const void *b)
{
    return ((const node_proc *)a)->pid - ((const node_proc *)b)->pid;
}

int node_scan_run(node_scan *s, const char *const *dirs, size_t ndirs)
{
    memset(s, 0, sizeof(*s));
    if (!dirs)
        dirs = default_dirs, ndirs = 2;
    walk w;
    memset(&w, 0, sizeof(w));
    int err = walk_proc(&w);
    for (size_t i = 0; !err && i < w.n; i++) {
        bool first = true; /* one process of each mount namespace */
        for (size_t k = 0; first && k < i; k++)
            first = w.p[k].mnt != w.p[i].mnt;
        if (!first)
            continue;
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/root", w.p[i].pid);
        int root = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        for (size_t k = 0; !err && root >= 0 && k < ndirs; k++) {
            int base = open_under(root, dirs[k]);
            if (base >= 0)
                err = scan_page_dir(s, &w, base);
        }
        if (root >= 0)
            close(root);
    }
    free(w.p);
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

/* Reads /proc/PID/NAME whole (up to len - 1 bytes) into buf: its length, 0
 * when it cannot be read. */
static size_t proc_file(int pid, const char *name, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t n = 0;
    for (ssize_t k; n < len - 1 && (k = read(fd, buf + n, len - 1 - n)) > 0;)
        n += (size_t)k;
    close(fd);
    buf[n] = '\0';
    return n;
}

/* NAME's value in an environment block of n bytes, into out. */
static void env_value(const char *env, size_t n, const char *name, char *out, size_t len)
{
    size_t k = strlen(name);
    for (size_t i = 0; i < n; i += strlen(env + i) + 1)
        if (!strncmp(env + i, name, k) && env[i + k] == '=') {
            snprintf(out, len, "%s", env + i + k + 1);
            return;
        }
}

/* The text after key in path up to the next character of stop (or the
 * end), into out; false if key is not there. */
static bool after(const char *path, const char *key, const char *stop, char *out, size_t len)
{
    const char *at = strstr(path, key);
    if (!at)
        return false;
    at += strlen(key);
    size_t n = strcspn(at, stop);
    snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), at);
    return n > 0;
}

void node_cgroup_parse(const char *path, char *pod, size_t podlen, char *container,
                       size_t clen, char *job, size_t joblen)
{
    pod[0] = container[0] = job[0] = '\0';
    if (strstr(path, "kubepods") && after(path, "pod", "/.\n", pod, podlen)) {
        for (char *c = pod; *c; c++)
            if (*c == '_') /* the systemd driver's pod<uid with _>.slice */
                *c = '-';
        const char *last = strrchr(path, '/');
        char leaf[160];
        snprintf(leaf, sizeof(leaf), "%s", last ? last + 1 : path);
        leaf[strcspn(leaf, "\n")] = '\0';
        char *dot = strstr(leaf, ".scope");
        if (dot)
            *dot = '\0';
        const char *id = strrchr(leaf, '-'); /* cri-containerd-<id>, docker-<id> */
        if (strncmp(leaf, "pod", 3) && strncmp(leaf, "kubepods", 8))
            snprintf(container, clen, "%s", id ? id + 1 : leaf);
    }
    after(path, "/job_", "/\n", job, joblen);
}

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
    size_t n = proc_file(p->pid, "environ", env, sizeof(env));
    env_value(env, n, "CUPOOL_GROUP", p->group, sizeof(p->group));
    char cg[4096];
    if (proc_file(p->pid, "cgroup", cg, sizeof(cg)))
        node_cgroup_parse(cg, p->pod, sizeof(p->pod), p->container, sizeof(p->container),
                          p->job, sizeof(p->job));
    if (!p->job[0])
        env_value(env, n, "SLURM_JOB_ID", p->job, sizeof(p->job));
}

void node_labels(const node_proc *p, char *buf, size_t len)
{
    const char *names[] = {"user", "group", "pod_uid", "container_id", "slurm_job"};
    const char *values[] = {p->user, p->group, p->pod, p->container, p->job};
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < 5 && n < len; i++) {
        if (i)
            buf[n++] = ',';
        stats_prometheus_label(names[i], values[i], buf + n, len - n);
        n += strlen(buf + n);
    }
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

const char *node_skip_help(enum node_skip r)
{
    static const char *const helps[] = {
#define NODE_X(name, help) help,
        NODE_SKIP_REASONS(NODE_X)
#undef NODE_X
    };
    return helps[r];
}
