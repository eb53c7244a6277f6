/* SPDX-License-Identifier: Apache-2.0 */
/*
 * proclabels.h - what a process is, as the kernel vouches for it, kept
 * apart from what the process only claims.
 *
 * Vouched: the Slurm job and the Kubernetes pod and container read from the
 * process's cgroup path (/proc/PID/cgroup), which only root (Slurm's
 * slurmstepd, the kubelet and its container runtime) can place it in. A
 * path counts only where it starts as theirs do, from the root of the
 * hierarchy: a user may make cgroups of any name in a subtree delegated to
 * them (systemd's user@UID.service), so "job_7" or "kubepods" further down
 * proves nothing. Claimed: SLURM_JOB_ID and CUPOOL_GROUP from the process's
 * environment (/proc/PID/environ), which the process wrote itself.
 */
#ifndef CUPOOL_NODE_PROCLABELS_H
#define CUPOOL_NODE_PROCLABELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct proc_vouched {
    char slurm_job[24];   /* job id from a Slurm job's cgroup, or "" */
    char pod[64];         /* Kubernetes pod UID, or "" */
    char container[80];   /* its container's ID, or "" */
} proc_vouched;

typedef struct proc_claimed {
    char slurm_job[24];   /* SLURM_JOB_ID, or "" */
    char group[65];       /* CUPOOL_GROUP, or "" */
} proc_claimed;

/* What the cgroup file text (the whole of /proc/PID/cgroup: lines of
 * ID:CONTROLLERS:PATH) of a process of user uid vouches for, into *v
 * (every field "" where it vouches for nothing). Slurm's paths:
 * /system.slice/[NODE_]slurmstepd.scope/job_N/... (cgroup v2) and
 * /slurm[_NODE]/uid_UID/job_N/... (v1, UID the process's own); the
 * kubelet's: /kubepods[/QOS]/podUID/CONTAINER (cgroupfs driver) and
 * /kubepods.slice/[kubepods-QOS.slice/]kubepods[-QOS]-podUID.slice/
 * RUNTIME-CONTAINER.scope (systemd driver). A path outside the reader's
 * cgroup namespace (it starts with /..) vouches for nothing. */
void proclabels_parse_cgroup(const char *text, uint32_t uid, proc_vouched *v);

/* Reads both of process pid (of user uid) from /proc: *v from its cgroup
 * file, *c from its environment, which is read into env (len bytes, the
 * caller's, reused across calls: environments run to many KiB). */
void proclabels_read(int pid, uint32_t uid, proc_vouched *v, proc_claimed *c, char *env,
                     size_t len);

/* docs/STATS.md's section on the exporter's labels (cupool-stat fields
 * prints it), kept beside what makes them. */
#define PROCLABELS_DOC                                                                    \
    "\n## The exporter's labels\n\n" \
    "`cupool exporter` labels each series `pid` (as the node sees it), `comm`,\n" \
    "`device` (a device's), and, by who vouches for them:\n\n" \
    "| label | from | vouched for by |\n| --- | --- | --- |\n" \
    "| `user` | the process's uid (`/proc/PID`) | the kernel |\n" \
    "| `slurm_job` | a cgroup path Slurm made: `/system.slice/slurmstepd.scope/job_N/...`, " \
    "`/slurm/uid_UID/job_N/...` | the kernel (only root places a process there) |\n" \
    "| `pod_uid`, `container_id` | a cgroup path the kubelet made: `/kubepods/...`, " \
    "`/kubepods.slice/...` | the kernel |\n" \
    "| `claimed_slurm_job` | `SLURM_JOB_ID` in its environment | no one: the process " \
    "says so |\n" \
    "| `claimed_group` | `CUPOOL_GROUP` in its environment (a group of its user's) | " \
    "no one: the process says so |\n\n" \
    "A label is empty where it does not apply. A cgroup path counts only from\n" \
    "the root of the hierarchy as the reader sees it: the same names further\n" \
    "down (a subtree systemd delegated to a user) or outside the reader's cgroup\n" \
    "namespace vouch for nothing."

#endif
