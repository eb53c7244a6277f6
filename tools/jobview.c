/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jobview.c - see jobview.h.
 *
 * A communicator is matched by its id alone: every rank of a job computes
 * the same one (shim/watch/job.h), and a 64-bit hash of a random unique id
 * does not meet another job's by chance. Ranks are counted, not named, on
 * the other side: what no page here lists is "on other nodes". The pages
 * are untrusted input: a rank or size is printed as it is, never used as
 * an index.
 */
#include <stdint.h>
#include <stdio.h>

#include "jobview.h"
#include "text.h"

enum { PEERS_MAX = 1024 }; /* ranks listed per communicator */

/* A rank of the communicator that another process on the node holds. */
typedef struct peer {
    const stats_view *view;
    const stats_comm *comm;
} peer;

/* The user of pid as s saw it, or UINT32_MAX if s does not hold it. */
static uint32_t owner_of(const node_scan *s, int pid)
{
    for (size_t i = 0; i < s->nprocs; i++)
        if (s->procs[i].pid == pid)
            return s->procs[i].uid;
    return UINT32_MAX;
}

/* The ranks of id that processes of s other than pid, of pid's user, hold,
 * up to max, into p (another user's process claiming id is not of its job:
 * a guessed id). Returns how many there are (more than max if some did not
 * fit). */
static size_t find_peers(const node_scan *s, int pid, uint64_t id, peer *p, size_t max)
{
    size_t n = 0;
    uint32_t owner = owner_of(s, pid);
    for (size_t i = 0; i < s->nprocs; i++) {
        const stats_view *v = &s->procs[i].view;
        if (owner != UINT32_MAX && s->procs[i].uid != owner)
            continue;
        for (uint32_t k = 0; v->pid != pid && k < v->ncomms; k++) {
            if (v->comms[k].id != id)
                continue;
            if (n < max)
                p[n] = (peer){v, &v->comms[k]};
            n++;
        }
    }
    return n;
}

/* How many of v's entries name id: its own ranks in it. */
static size_t own_ranks(const stats_view *v, uint64_t id)
{
    size_t n = 0;
    for (uint32_t k = 0; k < v->ncomms; k++)
        n += v->comms[k].id == id;
    return n;
}

/* Whether v's entry i is the first of its id there (one id met again is
 * the same communicator: ranks of ncclCommInitAll, all in one process). */
static bool first_of_id(const stats_view *v, uint32_t i)
{
    for (uint32_t k = 0; k < i; k++)
        if (v->comms[k].id == v->comms[i].id)
            return false;
    return true;
}

/* The ranks of nranks no page read here holds (0 if the pages claim more,
 * which only a page that lies does). */
static long long elsewhere(int32_t nranks, size_t here)
{
    return nranks > 0 && (size_t)nranks > here ? (long long)nranks - (long long)here : 0;
}

/* A device in text, right-aligned in width columns ("?" if unknown). */
static void text_device(text_buf *o, int32_t device, int width)
{
    if (device >= 0)
        text_put(o, "%*d", width, device);
    else
        text_put(o, "%*s", width, "?");
}

/* Communicator c of v (the first entry of its id) as text. */
static void text_comm(text_buf *o, const stats_view *v, const stats_comm *c, const node_scan *s,
                      peer *p)
{
    text_put(o, "communicator %016llx: ", (unsigned long long)c->id);
    const char *sep = "";
    for (uint32_t k = 0; k < v->ncomms; k++)
        if (v->comms[k].id == c->id) {
            text_put(o, "%srank %d", sep, v->comms[k].rank);
            sep = ", ";
        }
    text_put(o, " of %d, device ", c->nranks);
    text_device(o, c->device, 0);
    unsigned long long ops = 0;
    bool suspended = false;
    for (uint32_t k = 0; k < v->ncomms; k++)
        if (v->comms[k].id == c->id) {
            ops += v->comms[k].issued;
            suspended |= v->comms[k].suspended != 0;
        }
    text_put(o, "; %llu operation%s issued here%s\n", ops, ops == 1 ? "" : "s",
        suspended ? "; suspended by cupool (it resumes at the next NCCL call, or with "
                    "cupool resume)" : "");
    size_t n = find_peers(s, v->pid, c->id, p, PEERS_MAX), here = n + own_ranks(v, c->id);
    if (n)
        text_put(o, "      PID COMMAND          RANK DEVICE\n");
    else
        text_put(o, "  no other process on this node holds a rank of it\n");
    for (size_t i = 0; i < n && i < PEERS_MAX; i++) {
        char name[sizeof(p[i].view->comm)];
        text_put(o, "  %7d %-16s %4d ", p[i].view->pid,
            text_printable(p[i].view->comm, name, sizeof(name)), p[i].comm->rank);
        text_device(o, p[i].comm->device, 6);
        text_put(o, "\n");
    }
    long long away = elsewhere(c->nranks, here);
    if (away)
        text_put(o, "  %lld of %d ranks on other nodes\n", away, c->nranks);
    else
        text_put(o, "  all %d ranks on this node\n", c->nranks);
}

static void json_device(text_buf *o, int32_t device)
{
    if (device >= 0)
        text_put(o, "%d", device);
    else
        text_put(o, "null");
}

static void json_name(text_buf *o, const char *comm)
{
    char b[6 * 32 + 3];
    stats_json_string(comm, b, sizeof(b));
    text_put(o, "%s", b);
}

/* Communicator c of v (the first entry of its id) as a JSON object. */
static void json_comm(text_buf *o, const stats_view *v, const stats_comm *c, const node_scan *s,
                      peer *p)
{
    text_put(o, "{\"id\":\"%016llx\",\"nranks\":%d,\"ranks\":[", (unsigned long long)c->id,
        c->nranks);
    const char *sep = "";
    for (uint32_t k = 0; k < v->ncomms; k++)
        if (v->comms[k].id == c->id) {
            text_put(o, "%s{\"rank\":%d,\"device\":", sep, v->comms[k].rank);
            json_device(o, v->comms[k].device);
            text_put(o, ",\"operations\":%llu,\"suspended\":%s}",
                (unsigned long long)v->comms[k].issued,
                v->comms[k].suspended ? "true" : "false");
            sep = ",";
        }
    size_t n = find_peers(s, v->pid, c->id, p, PEERS_MAX), here = n + own_ranks(v, c->id);
    text_put(o, "],\"peers\":[");
    for (size_t i = 0; i < n && i < PEERS_MAX; i++) {
        text_put(o, "%s{\"pid\":%d,\"comm\":", i ? "," : "", p[i].view->pid);
        json_name(o, p[i].view->comm);
        text_put(o, ",\"rank\":%d,\"device\":", p[i].comm->rank);
        json_device(o, p[i].comm->device);
        text_put(o, "}");
    }
    text_put(o, "],\"ranks_elsewhere\":%lld}", elsewhere(c->nranks, here));
}

size_t jobview_format(const stats_view *v, const node_scan *s, bool json, char *buf,
                      size_t len)
{
    static peer p[PEERS_MAX];
    text_buf o = {buf, len, 0};
    char name[sizeof(v->comm)];
    if (json) {
        text_put(&o, "{\"pid\":%d,\"comm\":", v->pid);
        json_name(&o, v->comm);
        text_put(&o, ",\"nccl_comms\":%llu,\"gate\":{\"closed\":%s,\"waiting\":%u,"
            "\"can_suspend\":%s},\"communicators\":[", (unsigned long long)v->proc.nccl_comms,
            v->gate.state == STATS_GATE_CLOSED ? "true" : "false", v->gate.waiting,
            v->gate.can_suspend ? "true" : "false");
    } else {
        text_put(&o, "%d %s: %llu NCCL communicator%s", v->pid,
            text_printable(v->comm, name, sizeof(name)),
            (unsigned long long)v->proc.nccl_comms, v->proc.nccl_comms == 1 ? "" : "s");
        if (v->proc.nccl_comms > v->ncomms)
            text_put(&o, " (its page lists %u)", v->ncomms);
        if (v->gate.state == STATS_GATE_CLOSED)
            text_put(&o, "; its NCCL gate is closed by cupool, %u call%s waiting", v->gate.waiting,
                v->gate.waiting == 1 ? "" : "s");
        text_put(&o, "\n");
    }
    const char *sep = "";
    for (uint32_t i = 0; i < v->ncomms; i++) {
        if (!first_of_id(v, i))
            continue;
        text_put(&o, "%s", sep);
        if (json)
            json_comm(&o, v, &v->comms[i], s, p);
        else
            text_comm(&o, v, &v->comms[i], s, p);
        sep = json ? "," : "";
    }
    if (json)
        text_put(&o, "]}\n");
    return text_done(&o);
}
