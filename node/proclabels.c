/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proclabels.c - see proclabels.h.
 *
 * A cgroup path is cut into its first few components and matched against
 * the shapes Slurm and the kubelet give theirs, from the root down; any
 * other shape vouches for nothing. Ids are taken only in the characters
 * they are made of (digits for a job, hex and '-' for a pod or container).
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proclabels.h"

enum { MAX_PARTS = 6, PART_LEN = 160 };

typedef struct parts {
    char p[MAX_PARTS][PART_LEN];
    int n;
} parts;

/* Cuts path (up to its end or a newline) at '/' into at most MAX_PARTS
 * components; false for a path that is not absolute or leaves the
 * reader's cgroup namespace ("..") or holds a component too long. */
static bool parts_cut(const char *path, parts *out)
{
    out->n = 0;
    if (path[0] != '/')
        return false;
    for (const char *s = path + 1; *s && *s != '\n' && out->n < MAX_PARTS;) {
        size_t k = strcspn(s, "/\n");
        if (k >= PART_LEN || (k == 2 && !strncmp(s, "..", 2)))
            return false;
        memcpy(out->p[out->n], s, k);
        out->p[out->n++][k] = '\0';
        s += k + (s[k] == '/');
    }
    return true;
}

/* Whether s, from its start, is prefix then only characters of set up to
 * the end or suffix, at least one of them; they are copied into out. */
static bool id_after(const char *s, const char *prefix, const char *set, const char *suffix,
                     char *out, size_t len)
{
    size_t pl = strlen(prefix);
    if (strncmp(s, prefix, pl))
        return false;
    s += pl;
    size_t k = strspn(s, set);
    if (!k || k >= len || strcmp(s + k, suffix))
        return false;
    memcpy(out, s, k);
    out[k] = '\0';
    return true;
}

static const char digits[] = "0123456789";
static const char hexdash[] = "0123456789abcdef-_";

/* /system.slice/[NODE_]slurmstepd.scope/job_N or /slurm[_NODE]/uid_UID/job_N. */
static void slurm_job(const parts *c, uint32_t uid, proc_vouched *v)
{
    if (c->n < 3)
        return;
    size_t k = strlen(c->p[1]);
    bool v2 = !strcmp(c->p[0], "system.slice") &&
              (!strcmp(c->p[1], "slurmstepd.scope") ||
               (k > 17 && !strcmp(c->p[1] + k - 17, "_slurmstepd.scope")));
    char u[16];
    bool v1 = (!strcmp(c->p[0], "slurm") || !strncmp(c->p[0], "slurm_", 6)) &&
              id_after(c->p[1], "uid_", digits, "", u, sizeof(u)) &&
              strtoul(u, NULL, 10) == uid;
    if (v2 || v1)
        id_after(c->p[2], "job_", digits, "", v->slurm_job, sizeof(v->slurm_job));
}

/* The container's id in a leaf: cri-containerd-ID.scope, docker-ID.scope,
 * crio-ID.scope (systemd driver) or ID (cgroupfs driver). */
static void container_id(const char *leaf, bool systemd, char *out, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    const char *dash = strrchr(leaf, '-');
    if (!systemd)
        id_after(leaf, "", hex, "", out, len);
    else if (dash)
        id_after(dash + 1, "", hex, ".scope", out, len);
}

/* /kubepods[/QOS]/podUID/ID or /kubepods.slice/[kubepods-QOS.slice/]
 * kubepods[-QOS]-podUID.slice/RUNTIME-ID.scope. */
static void kube_pod(const parts *c, proc_vouched *v)
{
    bool systemd = c->n >= 2 && !strcmp(c->p[0], "kubepods.slice");
    if (!systemd && (c->n < 2 || strcmp(c->p[0], "kubepods")))
        return;
    int at = 1;
    static const char *const qos[] = {"burstable", "besteffort"};
    for (int q = 0; q < 2; q++) {
        char name[64];
        snprintf(name, sizeof(name), systemd ? "kubepods-%s.slice" : "%s", qos[q]);
        if (!strcmp(c->p[1], name)) {
            at = 2;
            snprintf(name, sizeof(name), "kubepods-%s-pod", qos[q]);
            if (at < c->n && systemd &&
                !id_after(c->p[at], name, hexdash, ".slice", v->pod, sizeof(v->pod)))
                return;
        }
    }
    if (at >= c->n)
        return;
    if (!v->pod[0] && !id_after(c->p[at], systemd ? "kubepods-pod" : "pod", hexdash,
                                systemd ? ".slice" : "", v->pod, sizeof(v->pod)))
        return;
    for (char *s = v->pod; *s; s++)
        if (*s == '_') /* the systemd driver's podUID with '_' for '-' */
            *s = '-';
    if (at + 1 < c->n)
        container_id(c->p[at + 1], systemd, v->container, sizeof(v->container));
}

void proclabels_parse_cgroup(const char *text, uint32_t uid, proc_vouched *v)
{
    memset(v, 0, sizeof(*v));
    for (const char *line = text; line && *line;) {
        const char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        const char *nl = strchr(line, '\n');
        parts c;
        if (c2 && (!nl || c2 < nl) && parts_cut(c2 + 1, &c)) {
            if (!v->slurm_job[0])
                slurm_job(&c, uid, v);
            if (!v->pod[0])
                kube_pod(&c, v);
        }
        line = nl ? nl + 1 : NULL;
    }
}

/* /proc/PID/NAME's first len - 1 bytes into buf, NUL-ended: how many. */
static size_t proc_read(int pid, const char *name, char *buf, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/%s", pid, name);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(buf, 1, len - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    return n;
}

/* NAME's value in an environment block of n bytes (NAME=VALUE strings,
 * each NUL-ended; env[n] is NUL too), into out: "" if it is not there. */
static void env_value(const char *env, size_t n, const char *name, char *out, size_t len)
{
    size_t k = strlen(name);
    out[0] = '\0';
    for (const char *e = env, *end = env + n; e < end; e = memchr(e, '\0', (size_t)(end - e) + 1) + 1)
        if (!strncmp(e, name, k) && e[k] == '=') {
            snprintf(out, len, "%s", e + k + 1);
            break;
        }
}

void proclabels_read(int pid, uint32_t uid, proc_vouched *v, proc_claimed *c, char *env,
                     size_t len)
{
    char cg[4096];
    proc_read(pid, "cgroup", cg, sizeof(cg));
    proclabels_parse_cgroup(cg, uid, v);
    size_t n = proc_read(pid, "environ", env, len);
    env_value(env, n, "SLURM_JOB_ID", c->slurm_job, sizeof(c->slurm_job));
    env_value(env, n, "CUPOOL_GROUP", c->group, sizeof(c->group));
}
