/* SPDX-License-Identifier: Apache-2.0 */
/*
 * job.c - see job.h.
 *
 * One fixed table of the communicators alive, under one lock: the calls
 * that make and end communicators are rare, and a fixed table needs no
 * allocation on NCCL's paths. A communicator past the table's room is
 * counted, not listed. NCCL's own functions are found the way comm.c finds
 * them (shim_dlsym_loaded in libnccl.so.2), each once; those this module
 * asks are optional (ncclCommMemStats is 2.29.7's), so a missing one is no
 * error here.
 *
 * Suspending: the table's lock is held around ncclCommSuspend (so that a
 * destroy waits for it, never the reverse), which returns at once.
 * Resuming is a barrier with the other ranks, so it runs outside the lock:
 * every communicator cupool suspended in this process is resumed together,
 * in one NCCL group, in the order of their ids (every rank computes them
 * alike; two ranks of one communicator in this process by rank), so that
 * neither two ranks in this process nor two processes that list their
 * communicators in different orders wait on each other. Meanwhile the
 * table holds still (the resume holds its entries by address): a destroy
 * waits for the resume to end, as a destroy fills its slot with the last
 * entry, and so does a second resume (one at a time). The memory a resume allocates from the helper
 * thread is not noted as NCCL's own (comm.h): its later free comes inside
 * a destroy or a suspend, both after the work on it ended.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>

#include "job.h"
#include "log.h"
#include "process.h"
#include "symbols.h"

enum {
    JOB_COMMS_MAX = 256,     /* communicators listed; more are counted */
    STAT_GPU_MEM_SUSPEND = 0, /* ncclCommMemStat_t's ncclStatGpuMemSuspend */
    STAT_GPU_MEM_TOTAL = 3,   /* ... and ncclStatGpuMemTotal */
    SUSPEND_MEM = 1,          /* ncclCommSuspend's NCCL_SUSPEND_MEM */
    NCCL_SYSTEM_ERROR = 2,
};

typedef int nccl_result; /* ncclResult_t */

typedef struct job_comm {
    void *comm;
    stats_comm info;
    uint32_t splits;          /* splits of it so far: its children's ids */
    uint64_t held, suspendable; /* as last asked; STATS_UNKNOWN if not told */
} job_comm;

/* Guards the table. Taken by the wrappers of the calls that make and end
 * communicators (never around NCCL's own call) and by the helper thread,
 * which asks NCCL for each one's memory under it, so that a communicator
 * is never asked about once its destroy began. */
static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t comms_idle = PTHREAD_COND_INITIALIZER; /* a resume ended */
static job_comm comms[JOB_COMMS_MAX];
static size_t ncomms;
static uint64_t unlisted;     /* alive past the table's room, or not named */
static bool resuming;         /* a resume runs: the table holds still */
static atomic_uint nsuspended; /* entries cupool left suspended */

uint64_t shim_job_hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* NCCL's function name, found once; NULL if this NCCL has none. */
static void *job_fn(_Atomic(void *) *slot, const char *name)
{
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (f)
        return f;
    static const char *const nccl[] = {"libnccl.so.2", NULL};
    f = shim_dlsym_loaded(name, nccl);
    atomic_store_explicit(slot, f, memory_order_release);
    return f;
}

/* An int NCCL tells of comm (ncclCommCuDevice, ncclCommUserRank,
 * ncclCommCount: all (comm, int *)), or fallback. */
static int ask_int(_Atomic(void *) *slot, const char *name, void *comm, int fallback)
{
    nccl_result (*f)(void *, int *) = (nccl_result (*)(void *, int *))job_fn(slot, name);
    int v = fallback;
    return f && f(comm, &v) == 0 ? v : fallback;
}

static int device_of(void *comm)
{
    static _Atomic(void *) fn;
    return ask_int(&fn, "ncclCommCuDevice", comm, -1);
}

/* comm's entry, or NULL. Needs comms_lock. */
static job_comm *find_locked(void *comm)
{
    for (size_t i = 0; i < ncomms; i++)
        if (comms[i].comm == comm)
            return &comms[i];
    return NULL;
}

static void publish_count_locked(void)
{
    shim_gauge_set(SHIM_nccl_comms, ncomms + unlisted);
}

/* Records comm (its device found beforehand, outside the lock). */
static void add(void *comm, uint64_t id, int rank, int nranks, int device)
{
    if (!comm)
        return;
    pthread_mutex_lock(&comms_lock);
    job_comm *c = find_locked(comm); /* the same handle again: NCCL reused it */
    if (!c && ncomms < JOB_COMMS_MAX)
        c = &comms[ncomms++];
    if (c)
        *c = (job_comm){comm, {id, rank, nranks, device, 0, 0}, 0, STATS_UNKNOWN,
                        STATS_UNKNOWN};
    else
        unlisted++;
    publish_count_locked();
    pthread_mutex_unlock(&comms_lock);
}

void shim_job_made(void *comm, uint64_t id, int rank, int nranks)
{
    if (comm)
        add(comm, id, rank, nranks, device_of(comm));
}

void shim_job_made_all(void *const *comms_made, int n)
{
    static atomic_uint made;
    struct { int32_t pid; uint32_t seq; uint64_t ns; } seed = {
        (int32_t)getpid(), atomic_fetch_add(&made, 1), shim_unix_ns()};
    uint64_t id = shim_job_hash(SHIM_JOB_FNV_BASIS, &seed, sizeof(seed));
    for (int i = 0; i < n; i++)
        shim_job_made(comms_made[i], id, i, n);
}

/* The id of parent's next child of color (counting the split either way:
 * every rank of parent splits, a rank with no color too). The parent not
 * known (made by a call not recorded): its id counts as 0. */
static uint64_t child_id(void *parent, int color)
{
    struct { uint64_t parent; uint32_t seq; int32_t color; } key = {0, 0, color};
    pthread_mutex_lock(&comms_lock);
    job_comm *p = find_locked(parent);
    if (p) {
        key.parent = p->info.id;
        key.seq = p->splits++;
    }
    pthread_mutex_unlock(&comms_lock);
    return shim_job_hash(SHIM_JOB_FNV_BASIS, &key, sizeof(key));
}

void shim_job_split(void *parent, int color, void *child)
{
    static _Atomic(void *) rank_fn, count_fn;
    uint64_t id = child_id(parent, color);
    if (!child)
        return;
    int rank = ask_int(&rank_fn, "ncclCommUserRank", child, -1);
    int nranks = ask_int(&count_fn, "ncclCommCount", child, 0);
    add(child, id, rank, nranks, device_of(child));
}

void shim_job_unnamed(void *comm)
{
    if (!comm)
        return;
    pthread_mutex_lock(&comms_lock);
    unlisted++;
    publish_count_locked();
    pthread_mutex_unlock(&comms_lock);
}

void shim_job_gone(void *comm)
{
    pthread_mutex_lock(&comms_lock);
    /* While a resume runs, its entries are held by address (batch): none
     * may move, and a destroy fills its slot with the last entry. */
    while (resuming)
        pthread_cond_wait(&comms_idle, &comms_lock);
    job_comm *c = find_locked(comm);
    if (c && c->info.suspended)
        atomic_fetch_sub(&nsuspended, 1);
    if (c)
        *c = comms[--ncomms];
    else if (unlisted && comm)
        unlisted--;
    publish_count_locked();
    pthread_mutex_unlock(&comms_lock);
}

/* One of NCCL's memory figures of comm, or STATS_UNKNOWN. */
static uint64_t mem_stat(nccl_result (*f)(void *, int, uint64_t *), void *comm, int stat)
{
    uint64_t v = 0;
    return f && f(comm, stat, &v) == 0 ? v : STATS_UNKNOWN;
}

void shim_job_refresh(void)
{
    static _Atomic(void *) fn;
    pthread_mutex_lock(&comms_lock);
    nccl_result (*f)(void *, int, uint64_t *) =
        ncomms ? (nccl_result (*)(void *, int, uint64_t *))job_fn(&fn, "ncclCommMemStats")
               : NULL;
    for (size_t i = 0; i < ncomms; i++) {
        comms[i].held = mem_stat(f, comms[i].comm, STAT_GPU_MEM_TOTAL);
        comms[i].suspendable = mem_stat(f, comms[i].comm, STAT_GPU_MEM_SUSPEND);
    }
    pthread_mutex_unlock(&comms_lock);
}

/* a + b, STATS_UNKNOWN if either is. */
static uint64_t add_known(uint64_t a, uint64_t b)
{
    return a == STATS_UNKNOWN || b == STATS_UNKNOWN ? STATS_UNKNOWN : a + b;
}

void shim_job_memory(int dev, uint64_t *held, uint64_t *suspendable)
{
    *held = *suspendable = 0;
    pthread_mutex_lock(&comms_lock);
    for (size_t i = 0; i < ncomms; i++)
        if (comms[i].info.device == dev) {
            *held = add_known(*held, comms[i].held);
            *suspendable = add_known(*suspendable, comms[i].suspendable);
        }
    pthread_mutex_unlock(&comms_lock);
}

uint32_t shim_job_list(stats_comm *out, uint32_t max)
{
    uint32_t n = 0;
    pthread_mutex_lock(&comms_lock);
    for (size_t i = 0; i < ncomms && n < max; i++)
        out[n++] = comms[i].info;
    pthread_mutex_unlock(&comms_lock);
    return n;
}

/* ---- suspending ------------------------------------------------------- */

typedef nccl_result (*suspend_fn)(void *, int);
typedef nccl_result (*resume_fn)(void *);

static suspend_fn suspend_call(void)
{
    static _Atomic(void *) fn;
    return (suspend_fn)job_fn(&fn, "ncclCommSuspend");
}

static resume_fn resume_call(void)
{
    static _Atomic(void *) fn;
    return (resume_fn)job_fn(&fn, "ncclCommResume");
}

bool shim_job_can_suspend(void)
{
    return suspend_call() && resume_call();
}

typedef nccl_result (*group_fn)(void);

static group_fn group_call(bool start)
{
    static _Atomic(void *) fns[2];
    return (group_fn)job_fn(&fns[start], start ? "ncclGroupStart" : "ncclGroupEnd");
}

/* The entries a resume works on (one resume at a time: resuming). */
static job_comm *batch[JOB_COMMS_MAX];

/* Whether entry a comes before b: by id, then rank. */
static bool before(const job_comm *a, const job_comm *b)
{
    return a->info.id != b->info.id ? a->info.id < b->info.id : a->info.rank < b->info.rank;
}

/* Puts every suspended entry into batch, in order: how many. Needs
 * comms_lock, no resume running. */
static size_t batch_take_locked(void)
{
    size_t n = 0;
    for (size_t i = 0; i < ncomms; i++) {
        if (!comms[i].info.suspended)
            continue;
        size_t at = n++;
        for (; at && before(&comms[i], batch[at - 1]); at--)
            batch[at] = batch[at - 1];
        batch[at] = &comms[i];
    }
    return n;
}

/* NCCL's resume of the n communicators of batch, in one group: 0, or the
 * failure (of the group: none is counted resumed then). */
static nccl_result batch_resume(size_t n, char *why, size_t len)
{
    resume_fn f = resume_call();
    group_fn start = group_call(true), end = group_call(false);
    if (!f || !start || !end) {
        snprintf(why, len, "this NCCL has no ncclCommResume or ncclGroupStart");
        return NCCL_SYSTEM_ERROR;
    }
    nccl_result r = start();
    if (r) {
        snprintf(why, len, "ncclGroupStart before ncclCommResume: NCCL result %d", r);
        return r;
    }
    size_t i = 0;
    for (; i < n && r == 0; i++)
        r = f(batch[i]->comm);
    nccl_result e = end();
    if (r)
        snprintf(why, len, "ncclCommResume refused communicator %016llx (rank %d of %d): "
                 "NCCL result %d", (unsigned long long)batch[i - 1]->info.id,
                 batch[i - 1]->info.rank, batch[i - 1]->info.nranks, r);
    else if (e)
        snprintf(why, len, "ncclGroupEnd of the resume of %zu communicator%s (the first "
                 "%016llx): NCCL result %d (a rank did not come in time?)", n,
                 n == 1 ? "" : "s", (unsigned long long)batch[0]->info.id, e);
    return r ? r : e;
}

/* Resumes every communicator cupool suspended, together (see the top):
 * 0 with *n how many (0: none was), or the failure with why said. */
static nccl_result resume_suspended(size_t *n, char *why, size_t len)
{
    pthread_mutex_lock(&comms_lock);
    while (resuming)
        pthread_cond_wait(&comms_idle, &comms_lock);
    *n = batch_take_locked();
    resuming = *n > 0;
    pthread_mutex_unlock(&comms_lock);
    if (!*n)
        return 0;
    nccl_result r = batch_resume(*n, why, len);
    pthread_mutex_lock(&comms_lock);
    for (size_t i = 0; r == 0 && i < *n; i++) {
        batch[i]->info.suspended = 0;
        atomic_fetch_sub(&nsuspended, 1);
    }
    resuming = false;
    pthread_cond_broadcast(&comms_idle);
    pthread_mutex_unlock(&comms_lock);
    return r;
}

int shim_job_resume_lazy(void)
{
    if (!atomic_load_explicit(&nsuspended, memory_order_acquire))
        return 0;
    char why[200];
    size_t n;
    nccl_result r = resume_suspended(&n, why, sizeof(why));
    if (r == 0)
        shim_count_add(SHIM_nccl_lazy_resumes, n);
    else
        shim_log(SHIM_LOG_ERROR, "cannot resume the NCCL communicators cupool flush --nccl "
                 "suspended: %s", why);
    return r;
}

void shim_job_issue(void *comm)
{
    pthread_mutex_lock(&comms_lock);
    job_comm *c = find_locked(comm);
    if (c)
        c->info.issued++;
    pthread_mutex_unlock(&comms_lock);
}

/* id's target into *t: false if it has none. */
static bool target_of(uint64_t id, const uint64_t *ids, const uint64_t *targets, size_t n,
                      uint64_t *t)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id) {
            *t = targets[i];
            return true;
        }
    return false;
}

bool shim_job_behind(void *comm, const uint64_t *ids, const uint64_t *targets, size_t n)
{
    bool behind = false;
    pthread_mutex_lock(&comms_lock);
    for (size_t i = 0; i < ncomms && !behind; i++) {
        uint64_t t;
        if ((!comm || comms[i].comm == comm) &&
            target_of(comms[i].info.id, ids, targets, n, &t))
            behind = comms[i].info.issued < t;
    }
    pthread_mutex_unlock(&comms_lock);
    return behind;
}

uint64_t shim_job_devices(void)
{
    uint64_t bits = 0;
    pthread_mutex_lock(&comms_lock);
    for (size_t i = 0; i < ncomms; i++) {
        int d = comms[i].info.device;
        bits |= d >= 0 && d < 63 ? 1ull << d : 1ull << 63;
    }
    pthread_mutex_unlock(&comms_lock);
    return bits;
}

/* why, for communicator c: "what c: NCCL result r". */
static void say_comm(char *why, size_t len, const char *what, const job_comm *c,
                     nccl_result r)
{
    snprintf(why, len, "%s %016llx (rank %d of %d): NCCL result %d%s", what,
             (unsigned long long)c->info.id, c->info.rank, c->info.nranks, r,
             r == 5 ? " (ncclInvalidUsage: an operation outstanding?)" : "");
}

int shim_job_suspend_all(uint64_t *freed, char *why, size_t len)
{
    static _Atomic(void *) stats_fn;
    suspend_fn f = suspend_call();
    if (!f || !resume_call()) {
        snprintf(why, len, "this NCCL has no ncclCommSuspend (2.29.7 or later)");
        return NCCL_SYSTEM_ERROR;
    }
    nccl_result (*ms)(void *, int, uint64_t *) =
        (nccl_result (*)(void *, int, uint64_t *))job_fn(&stats_fn, "ncclCommMemStats");
    nccl_result r = 0;
    size_t done = 0, now = 0;
    *freed = 0;
    pthread_mutex_lock(&comms_lock);
    for (; done < ncomms && r == 0; done++) {
        job_comm *c = &comms[done];
        if (c->info.suspended)
            continue;
        uint64_t gives = mem_stat(ms, c->comm, STAT_GPU_MEM_SUSPEND);
        r = f(c->comm, SUSPEND_MEM);
        if (r) {
            say_comm(why, len, "ncclCommSuspend refused communicator", c, r);
            break;
        }
        c->info.suspended = 2; /* suspended here: undone on a refusal */
        *freed = add_known(*freed, gives);
        now++;
    }
    for (size_t i = 0; i < done; i++)
        if (comms[i].info.suspended == 2)
            comms[i].info.suspended = 1;
    atomic_fetch_add(&nsuspended, (unsigned)now);
    if (r == 0) {
        shim_count_add(SHIM_nccl_suspends, now);
        if (*freed != STATS_UNKNOWN)
            shim_count_add(SHIM_nccl_freed, *freed);
    }
    pthread_mutex_unlock(&comms_lock);
    /* Those suspended before a refusal stay so: the controller resumes
     * every rank together (a resume meets the other ranks, which suspended
     * too and answer only to the controller), else the program's next NCCL
     * call does. */
    if (r && now)
        shim_log(SHIM_LOG_WARN, "process %d: %zu NCCL communicator%s suspended before the "
                 "refusal (%s) stay suspended until the controller resumes the job (or "
                 "the program's next NCCL call)", (int)getpid(), now, now == 1 ? "" : "s", why);
    return r;
}

int shim_job_resume_all(char *why, size_t len)
{
    size_t n;
    return resume_suspended(&n, why, len);
}
