/* SPDX-License-Identifier: Apache-2.0 */
/*
 * control.c - see control.h.
 *
 * Signals: taken at load by signals.c, which keeps them whatever the
 * program does later and chains the program's handlers. The handler writes
 * the signal number as one byte to a non-blocking pipe. The helper thread
 * starts with the first pool; it reads the pipe, and the requests on the
 * live page (cupool flush, cupool dump: no signal), and flushes or dumps
 * statistics with the pools' locks taken the ordinary way.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cap.h"
#include "capture.h"
#include "comm.h"
#include "control.h"
#include "cupti.h"
#include "device.h"
#include "fence.h"
#include "framework.h"
#include "group.h"
#include "job.h"
#include "log.h"
#include "ncclgate.h"
#include "nvml.h"
#include "park.h"
#include "process.h"
#include "recorder.h"
#include "safefile.h"
#include "signals.h"

static pthread_once_t helper_once = PTHREAD_ONCE_INIT;
/* Signals on_term holds while tracing (their byte means "end"). */
static sigset_t term_handled;

/* ---- signals -------------------------------------------------------------- */

/* A signal whose default action ends the process, while tracing, installed
 * only over that default action: the helper drains the trace, then the
 * signal is raised again with its default action. Without a helper there
 * is nothing buffered: terminate now. */
static void on_term(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (!shim_helper_running() || write(shim_doorbell_wr(), &b, 1) != 1) {
        struct sigaction dfl;
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        sigaction(sig, &dfl, NULL);
        raise(sig); /* delivered when this handler returns */
    }
    errno = saved;
}

/* The asynchronous signals whose default action ends the process. Not
 * SIGPIPE, SIGXFSZ, SIGXCPU and the faults: they come from what the thread
 * itself just did, which must not go on while the trace drains. */
static const int term_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGALRM,
                                   SIGVTALRM, SIGPROF, SIGUSR1, SIGUSR2};

static void install_term(void)
{
    sigemptyset(&term_handled);
    for (size_t i = 0; i < sizeof(term_signals) / sizeof(term_signals[0]); i++) {
        int sig = term_signals[i];
        struct sigaction sa, old;
        if (shim_signals_owns(sig) || sigaction(sig, NULL, &old) != 0 ||
            old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
            continue; /* cupool's, or the program handles or ignores it: its
                         exit path drains */
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_term;
        sa.sa_flags = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sig, &sa, NULL) == 0)
            sigaddset(&term_handled, sig);
    }
}

/* ---- statistics ------------------------------------------------------------ */

static pthread_mutex_t page_lock = PTHREAD_MUTEX_INITIALIZER;
static stats_page *page;                   /* guarded by page_lock */
/* Process memory outside each pool, written by the helper (NVML);
 * STATS_UNKNOWN where NVML cannot tell. */
static _Atomic uint64_t outside[SHIM_MAX_DEVICES];

int shim_ipc_export(const void *handle, uint64_t offset, uint64_t size, int dev,
                    uint32_t *slot, uint64_t *nonce)
{
    pthread_mutex_lock(&page_lock);
    int err = page ? stats_page_export(page, handle, offset, size, dev, slot, nonce)
                   : -ENOENT;
    pthread_mutex_unlock(&page_lock);
    return err;
}

void shim_stats_view(stats_view *v)
{
    memset(v, 0, offsetof(stats_view, dev));
    v->pid = (int32_t)getpid();
    shim_comm(v->comm, sizeof(v->comm));
    v->updated_ns = shim_unix_ns();
    v->flush_signal = shim_cfg.flush_signal;
    shim_framework_view fw;
    shim_framework_view_get(&fw);
    for (int i = 0; i < SHIM_MAX_DEVICES && v->ndevices < STATS_MAX_DEVICES; i++) {
        pool_stats ps;
        if (!shim_device_stats(i, &ps))
            continue;
        stats_device *d = &v->dev[v->ndevices++];
        stats_device_from_pool(d, i, &ps);
        shim_cap_view cv;
        shim_cap_view_of(i, &cv);
        d->cap = cv.limit;
        shim_device_counts_fill(i, d);
        d->outside_pool = atomic_load_explicit(&outside[i], memory_order_relaxed);
        d->passed = cv.passed;
        d->passed_peak = cv.passed_peak;
        shim_job_memory(i, &d->nccl_held, &d->nccl_suspendable);
        d->framework_allocated = fw.taken_ns ? fw.allocated[i] : STATS_UNKNOWN;
        d->framework_reserved = fw.taken_ns ? fw.reserved[i] : STATS_UNKNOWN;
        d->framework_inactive = fw.taken_ns ? fw.inactive[i] : STATS_UNKNOWN;
    }
#define X(name, unit, kind, help) \
    v->proc.name = shim_counter(SHIM_##name);
    STATS_PROCESS_FIELDS(X)
#undef X
    v->proc.framework_read_at = fw.taken_ns;
    v->ncomms = shim_job_list(v->comms, STATS_MAX_COMMS);
    shim_ncclgate_view(&v->gate);
    shim_park_view(&v->park);
}

/* Asks NVML what the process holds on each device with a pool, and keeps
 * the part the pool does not account for. Helper thread only. */
static void refresh_outside(void)
{
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        pool_stats ps;
        if (!shim_device_stats(i, &ps))
            continue;
        uint64_t used = shim_nvml_process_memory(i);
        atomic_store_explicit(&outside[i], used == STATS_UNKNOWN ? STATS_UNKNOWN
                              : used > ps.reserved ? used - ps.reserved : 0,
                              memory_order_relaxed);
    }
}

/* Appends buf to CUPOOL_STATS_FILE (with %p replaced by the pid), or
 * writes it to stderr when none is set or it cannot be written (said).
 * Never through a link at its name or one another user chose on its path,
 * never into something that is not a regular file of this user with one
 * name, and never into a file that had the name: safefile_append makes a
 * new one, so that a name another user swaps never gets another file
 * written. */
static void stats_write(const char *buf, size_t n)
{
    char path[SHIM_PATH_MAX + 32], shown[SHIM_PATH_MAX];
    const char *why = "the path is too long";
    if (*shim_cfg.stats_file &&
        shim_path_expand(shim_cfg.stats_file, (int)getpid(), path, sizeof(path)) == 0 &&
        safefile_append(path, buf, n, &why) == 0)
        return;
    if (*shim_cfg.stats_file)
        shim_log(SHIM_LOG_WARN, "cannot write to CUPOOL_STATS_FILE %s: %s; "
                 "writing to stderr", text_printable(shim_cfg.stats_file, shown,
                 sizeof(shown)), why);
    if (write(STDERR_FILENO, buf, n) < 0)
        return; /* nowhere left to say it */
}

/* At start-up: says at once when CUPOOL_STATS_FILE cannot be used (its
 * directory must take the new file each dump is), and falls back to
 * stderr (nothing is created before the first dump). */
static void stats_file_check(void)
{
    if (!*shim_cfg.stats_file)
        return;
    char path[SHIM_PATH_MAX + 32], dir[SHIM_PATH_MAX + 32];
    const char *why = "the path is too long";
    if (shim_path_expand(shim_cfg.stats_file, (int)getpid(), path, sizeof(path)) == 0 &&
        !(why = safefile_path_refusal(path))) {
        snprintf(dir, sizeof(dir), "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *(slash == dir ? slash + 1 : slash) = '\0';
        if (access(slash ? dir : ".", W_OK | X_OK) != 0) /* each dump is a new file */
            why = "its directory is missing or not writable";
    }
    if (!why)
        return;
    char shown[SHIM_PATH_MAX];
    shim_log(SHIM_LOG_ERROR, "CUPOOL_STATS_FILE=%s cannot be used: %s; statistics "
             "go to stderr", text_printable(shim_cfg.stats_file, shown, sizeof(shown)),
             why);
    shim_cfg.stats_file[0] = '\0';
}

/* Writes the full view (table and every field, or one JSON line). From
 * the helper (signal) or the exiting thread: the buffers are shared. */
static pthread_mutex_t dump_lock = PTHREAD_MUTEX_INITIALIZER;

static void dump_stats(void)
{
    static stats_view v;
    static char buf[65536];
    pthread_mutex_lock(&dump_lock);
    shim_stats_view(&v);
    size_t n;
    if (shim_cfg.stats_json) {
        n = stats_format_json(&v, buf, sizeof(buf));
    } else {
        const stats_view *one = &v;
        n = stats_format_table(&one, 1, buf, sizeof(buf));
        if (n < sizeof(buf))
            n += stats_format_detail(&v, buf + n, sizeof(buf) - n);
    }
    if (n >= sizeof(buf))
        n = sizeof(buf) - 1;
    stats_write(buf, n);
    pthread_mutex_unlock(&dump_lock);
}

static void publish(void)
{
    static stats_view v;
    pthread_mutex_lock(&page_lock);
    if (page) {
        shim_stats_view(&v);
        stats_page_publish(page, &v);
    }
    pthread_mutex_unlock(&page_lock);
}

/* ---- helper thread -------------------------------------------------------- */

/* The page is published every PUBLISH_MS; readers' requests (cupool
 * flush, dump, stat), which cost a look at two counters when there are
 * none, are served within REQUEST_MS. */
enum { PUBLISH_MS = 100, REQUEST_MS = 10, NVML_EVERY = 10 };

/* Drains the trace, then lets sig take its default course. */
static void terminate_drained(int sig)
{
    shim_trace_finish();
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    kill(getpid(), sig); /* process-directed: a thread that does not block
                            it takes it */
}

/* Each framework a flush releases (stats.h's STATS_FRAMEWORKS): what its
 * part is called, and its counter. */
static const struct {
    const char *label;
    enum shim_counter counter;
} framework_rows[SHIM_NFRAMEWORKS] = {
#define FRAMEWORK_ROW(X, name, label, help) \
    [SHIM_FRAMEWORK_##name] = {label, SHIM_framework_##name},
    STATS_FRAMEWORKS(FRAMEWORK_ROW, _)
#undef FRAMEWORK_ROW
};

/* Why a late flush's framework release has not run, in part of a line. */
static void framework_late_said(const shim_framework_result *f, char *buf, size_t len)
{
    if (f->waiting == SHIM_FW_WAIT_THREAD) {
        snprintf(buf, len, "; no thread could be started for the framework's "
                 "release: its cache stays");
        return;
    }
    snprintf(buf, len, "; %s: the framework's release runs as soon as it can, "
             "and is said then", f->waiting == SHIM_FW_WAIT_CAPTURE
             ? "a CUDA graph capture is under way"
             : f->waiting == SHIM_FW_WAIT_GIL
             ? "the program's Python lock (GIL) is held in a long call"
             : "the framework's release is still running");
}

/* Each framework in use, with what it gave back, in part of a line. */
static void framework_parts_said(const shim_framework_result *f, char *buf, size_t len)
{
    size_t at = 0;
    for (int i = 0; i < SHIM_NFRAMEWORKS && at < len; i++) {
        char b[32];
        if (f->seen[i])
            at += (size_t)snprintf(buf + at, len - at, "%s%s %s", at ? ", " : "; of it, ",
                                   framework_rows[i].label,
                                   stats_fmt_bytes(f->released[i], b, sizeof(b)));
    }
    if (at < len)
        snprintf(buf + at, len - at, "%s%s",
                 f->deferred ? " (after the graph capture under way)" : "",
                 f->failed ? " (a framework call raised; the program was not disturbed)" : "");
}

/* Counts what the frameworks' release did, and says it in part of a
 * line (into buf). */
static void framework_counted(const shim_framework_result *f, char *buf, size_t len)
{
    buf[0] = '\0';
    if (f->deferred)
        shim_count(SHIM_framework_deferred);
    if (f->status == SHIM_FW_LATE) {
        shim_count(SHIM_framework_late);
        framework_late_said(f, buf, len);
        return;
    }
    if (f->unable)
        shim_count(SHIM_framework_unable);
    bool any = false;
    uint64_t sum = 0;
    for (int i = 0; i < SHIM_NFRAMEWORKS; i++)
        any |= f->seen[i], sum += f->released[i];
    if (f->status != SHIM_FW_DONE || !any)
        return;
    shim_count(SHIM_framework_flushes);
    shim_count_add(SHIM_framework_flushed, sum);
    for (int i = 0; i < SHIM_NFRAMEWORKS; i++)
        shim_count_add(framework_rows[i].counter, f->released[i]);
    framework_parts_said(f, buf, len);
}

/* Counts a flush (under c) and says it in one line; a conditional one
 * that found nothing worth returning only at debug level. */
static void flush_said(enum shim_counter c, const char *by, const shim_framework_result *f)
{
    if (f->skipped && !f->own && f->status != SHIM_FW_LATE) {
        shim_log(SHIM_LOG_DEBUG, "flush (%s): nothing worth returning", by);
        return;
    }
    shim_count(c);
    shim_count_add(SHIM_flushed, f->own);
    char h[32], parts[512];
    framework_counted(f, parts, sizeof(parts));
    shim_log(SHIM_LOG_WARN, "flush (%s): returned %s to the driver in %.0f ms%s%s%s%s", by,
             stats_fmt_bytes(f->own, h, sizeof(h)), (double)f->took_ns / 1e6, parts,
             f->unable ? "; " : "", f->unable ? f->unable : "",
             f->unable ? " holds its own memory, which cannot be given back from outside" : "");
}

/* Asks the frameworks for their caches, then returns every cached segment
 * to the driver (framework.h; want: 0, or a group member's shortfall),
 * counted under c. A late one returns cupool's own cache at once, unless
 * a capture is under way; the rest when it lands. */
static void flush(enum shim_counter c, const char *by, uint64_t want)
{
    if (shim_park_parked()) { /* its memory is away: nothing to return, nothing to touch */
        shim_log(SHIM_LOG_INFO, "flush (%s): paused, nothing to return", by);
        return;
    }
    shim_framework_result f;
    uint64_t t0 = shim_mono_ns();
    shim_framework_flush(want, &f);
    if (f.status == SHIM_FW_LATE && shim_capture_gate_close()) {
        f.own = shim_device_flush_all();
        shim_capture_gate_open();
    }
    if (f.status == SHIM_FW_LATE)
        f.took_ns = shim_mono_ns() - t0;
    flush_said(c, by, &f);
}

/* A late flush that ran since: said and counted now. */
static void flush_landed(void)
{
    shim_framework_result f;
    if (shim_framework_landed(&f))
        flush_said(SHIM_flushes_landed, "landed late", &f);
}

static void handle(unsigned char b)
{
    if (b == SHIM_WAKE_DRAIN) {
        shim_trace_drain();
    } else if (b == SHIM_WAKE_LANDED) {
        flush_landed();
    } else if (sigismember(&term_handled, b) == 1) {
        /* Even when recording stopped on a write error since: the
         * program still has to end. */
        terminate_drained(b);
    } else if (b == shim_cfg.flush_signal) {
        flush(SHIM_signal_flushes, "a signal", 0);
    } else if (b == shim_cfg.stats_signal) {
        shim_job_refresh();
        shim_framework_view_now();
        dump_stats();
    }
}

/* A reader's request for the framework's figures (cupool stat, top),
 * answered once they are read or a second has passed: helper's. */
static uint64_t view_ticket, view_since_ms;

/* Whether the view request in t (or one waiting) can be answered now;
 * asks for a reading when one is due. */
static bool view_ready(uint64_t *t)
{
    uint64_t now = shim_mono_ns() / 1000000u;
    if (*t && !view_ticket)
        view_since_ms = now;
    if (*t > view_ticket)
        view_ticket = *t;
    if (!view_ticket)
        return false;
    bool coming = shim_framework_view_ask();
    if (coming && now - view_since_ms < 1000)
        return false;
    *t = view_ticket;
    view_ticket = 0;
    return true;
}

/* Serves what readers asked for on the page (cupool flush, cupool dump,
 * the framework's figures for cupool stat), then publishes and answers,
 * so that a reader that sees its answer sees the flush in the figures. */
static void serve_requests(void)
{
    uint64_t t[STATS_NREQUESTS];
    pthread_mutex_lock(&page_lock);
    for (int r = 0; r < STATS_NREQUESTS; r++)
        t[r] = page ? stats_page_pending(page, (stats_request)r) : 0;
    pthread_mutex_unlock(&page_lock);
    if (!view_ready(&t[STATS_REQ_VIEW]))
        t[STATS_REQ_VIEW] = 0;
    if (!t[STATS_REQ_FLUSH] && !t[STATS_REQ_DUMP] && !t[STATS_REQ_VIEW] &&
        !t[STATS_REQ_NCCL] && !t[STATS_REQ_PARK] && !t[STATS_REQ_UNPARK])
        return;
    if (t[STATS_REQ_NCCL]) { /* before a flush asked with it: what it frees flushes too */
        stats_nccl_ask a;
        pthread_mutex_lock(&page_lock);
        stats_page_nccl_asked(page, &a);
        pthread_mutex_unlock(&page_lock);
        shim_ncclgate_serve(&a);
    }
    if (t[STATS_REQ_FLUSH])
        flush(SHIM_requested_flushes, "cupool flush", 0);
    if (t[STATS_REQ_PARK]) /* after a flush asked with it */
        shim_park_serve(true);
    if (t[STATS_REQ_UNPARK])
        shim_park_serve(false);
    /* NCCL's memory figures only when a reader asks (cupool stat, dump):
     * its calls are the program's, not to be made on every tick. Outside
     * page_lock. */
    if (t[STATS_REQ_VIEW] || t[STATS_REQ_DUMP])
        shim_job_refresh();
    if (t[STATS_REQ_DUMP]) {
        shim_count(SHIM_requested_dumps);
        shim_framework_view_now();
        dump_stats();
    }
    publish();
    pthread_mutex_lock(&page_lock);
    for (int r = 0; r < STATS_NREQUESTS; r++)
        if (page && t[r])
            stats_page_answer(page, (stats_request)r, t[r]);
    pthread_mutex_unlock(&page_lock);
}

/* Serves a flush another member of the group asked for. */
static void serve_group(void)
{
    if (*shim_cfg.group && shim_framework_ending())
        shim_group_ending();
    uint64_t want = 0, t = shim_group_tick(&want);
    if (t) {
        flush(SHIM_group_flushes, "the group", want);
        shim_group_flushed(t);
    }
}

/* Publishes the page and drains the trace every PUBLISH_MS; while
 * recording, also advances the trace's tick every SHIM_TRACE_TICK_MS (the
 * rings read the clock again after it moves: recorder.h). */
static void *helper(void *arg)
{
    (void)arg;
    shim_signals_helper_mask(); /* cupool's own signals reach it even when
                                   every program thread blocks them */
    bool ticking = shim_cfg.live_page || shim_tracing() || *shim_cfg.group;
    uint64_t due = 0, group_due = 0, request_due = 0;
    for (unsigned publishes = 0;;) {
        uint64_t now = shim_mono_ns() / 1000000u;
        if (now >= group_due) {
            serve_group(); /* more often while a member waits for its turn */
            group_due = now + (shim_group_waiters() ? SHIM_GROUP_POLL_MS * 2 : PUBLISH_MS);
        }
        if (now >= due) {
            if (shim_cfg.live_page && publishes++ % NVML_EVERY == 0)
                refresh_outside();
            publish();
            if (shim_tracing())
                shim_trace_drain();
            due = now + PUBLISH_MS;
        }
        if (now >= request_due) {
            serve_requests();
            request_due = now + REQUEST_MS;
        }
        uint64_t next = due < group_due ? due : group_due;
        next = next < request_due ? next : request_due;
        int wait = !ticking ? -1 : (int)(next - now);
        if (shim_tracing() && wait > SHIM_TRACE_TICK_MS)
            wait = SHIM_TRACE_TICK_MS;
        struct pollfd pf = {.fd = shim_doorbell_rd(), .events = POLLIN};
        int r = poll(&pf, 1, wait);
        atomic_fetch_add_explicit(&shim_trace_ticks, 1, memory_order_relaxed);
        if (r < 0 && errno != EINTR)
            return NULL;
        if (r <= 0)
            continue;
        unsigned char b;
        ssize_t k = read(shim_doorbell_rd(), &b, 1);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return NULL;
        handle(b);
    }
}

static void helper_spawn(void)
{
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) /* until NVML answers */
        atomic_store_explicit(&outside[i], STATS_UNKNOWN, memory_order_relaxed);
    if (shim_cfg.live_page) {
        const char *why = NULL;
        bool passed_over;
        stats_page *p = stats_page_create(&why, &passed_over);
        char dir[256];
        text_printable(stats_page_dir(), dir, sizeof(dir));
        if (!p)
            shim_log(SHIM_LOG_WARN, "no live statistics page in %s: %s; the "
                     "program runs on without it (cupool stat and flush cannot "
                     "reach it)", dir, why);
        else if (passed_over)
            shim_log(SHIM_LOG_WARN, "%s/cupool-%u is not this user's (another user "
                     "made it): the live page is in %s instead", dir,
                     (unsigned)geteuid(), stats_page_path(p));
        pthread_mutex_lock(&page_lock);
        page = p;
        pthread_mutex_unlock(&page_lock);
    }
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, helper, NULL) != 0)
        shim_log(SHIM_LOG_ERROR, "cannot start the helper thread: signals "
                 "will not flush or dump statistics");
    else
        shim_helper_set_running(true);
    pthread_attr_destroy(&a);
}

/* Starts the helper thread if it is not running (idempotent): the first
 * pool's hook (shim_on_first_pool). */
static void helper_start(void)
{
    if (shim_doorbell_rd() >= 0)
        pthread_once(&helper_once, helper_spawn);
}

/* ---- out-of-memory report ------------------------------------------------- */

void shim_report_alloc_failure(int dev, size_t size, int err, const char *call)
{
    shim_count(SHIM_oom_reports);
    char rq[32];
    stats_fmt_bytes(size, rq, sizeof(rq));
    if (err != -ENOMEM && err != -EDQUOT) {
        shim_trace_event(TRACE_OOM, TRACE_R_ERROR, dev, 0, size);
        shim_log(SHIM_LOG_ERROR, "device %d: %s(%s) failed: %s", dev, call,
                 rq, err == -EOVERFLOW ? "size too large" : pool_strerror(err));
        return;
    }
    pool_stats ps;
    shim_device_stats(dev, &ps);
    stats_device d;
    stats_device_from_pool(&d, dev, &ps);
    shim_cap_view cv;
    shim_cap_view_of(dev, &cv);
    d.cap = cv.limit;
    size_t dfree = 0, dtotal = 0;
    shim_device_mem_info(dev, &dfree, &dtotal);
    char c[32], r[32], a[32], f[32], l[32], df[32];
    bool frag = stats_oom_is_fragmentation(size, d.allocated, d.cached,
                                           err == -EDQUOT ? d.cap : 0);
    shim_trace_event(TRACE_OOM, frag ? TRACE_R_FRAG : err == -EDQUOT ? TRACE_R_CAP
                                                      : TRACE_R_NOMEM, dev, 0, size);
    /* Memory passed on counts against the cap too (passed.h). */
    char passed[80] = "", pb[32];
    uint64_t pass_bytes = cv.passed;
    if (pass_bytes)
        snprintf(passed, sizeof(passed), "; %s more is allocated through calls "
                 "passed on", stats_fmt_bytes(pass_bytes, pb, sizeof(pb)));
    /* A refusal of the group's budget is reported as such, though the
     * group may have room again by now (its members moved meanwhile). */
    char group[1024];
    bool by_group = err == -EDQUOT && shim_group_refused();
    shim_group_report(dev, size, by_group, group, sizeof(group));
    const char *cause =
        by_group ? shim_group_cause()
        : frag ? "fragmentation: enough memory is free in total, but no free "
               "block is large enough and no new segment fits"
        : err == -EDQUOT ? "the cap: allocated memory plus this request "
                           "exceeds CUPOOL_MAX_RESERVED"
                         : "the device is out of memory";
    shim_log(SHIM_LOG_ERROR,
             "out of memory on device %d: %s(%s) failed\n"
             "  cap %s, reserved %s, allocated %s, cached free %s\n"
             "  largest free block %s, %lu free blocks, %lu segments, "
             "fragmentation %.0f%%, device free %s\n"
             "  cause: %s%s%s", dev, call, rq,
             d.cap ? stats_fmt_bytes(d.cap, c, sizeof(c)) : "none",
             stats_fmt_bytes(d.reserved, r, sizeof(r)),
             stats_fmt_bytes(d.allocated, a, sizeof(a)),
             stats_fmt_bytes(d.cached, f, sizeof(f)),
             stats_fmt_bytes(d.largest_free, l, sizeof(l)),
             (unsigned long)d.free_blocks, (unsigned long)d.segments,
             100.0 * stats_fragmentation(&d),
             stats_fmt_bytes(dfree, df, sizeof(df)), cause, passed, group);
}

/* ---- life cycle ----------------------------------------------------------- */

static void config_warning(const char *line)
{
    shim_log_always(SHIM_LOG_ERROR, "%s", line);
}

static void after_fork_child(void)
{
    /* The child must not touch the parent's CUDA state, nor the parent's
     * page, which the parent removes. It is single-threaded here, and its
     * destructor returns early (inactive), so page_lock is not needed. */
    shim_set_active(false);
    shim_helper_set_running(false);
    shim_signals_mute(); /* its signals must not reach the parent's helper */
    shim_doorbell_close();
    stats_page_forget(page);
    page = NULL;
    shim_group_forget();
    shim_trace_after_fork();
}

__attribute__((destructor)) static void shim_fini(void)
{
    if (!shim_active())
        return;
    if (shim_cfg.stats_at_exit)
        dump_stats();
    shim_trace_finish();
    /* The helper may be publishing: take the page from under it first. */
    pthread_mutex_lock(&page_lock);
    stats_page *p = page;
    page = NULL;
    pthread_mutex_unlock(&page_lock);
    stats_page_remove(p);
    shim_group_leave();
}

/* Whether any CUPOOL_* variable is set. */
static bool any_option_set(void)
{
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, "CUPOOL_", 7))
            return true;
    return false;
}

/* The shim's one constructor: everything at start-up, in order. */
__attribute__((constructor(101))) static void shim_init(void)
{
    shim_devices_init();
    shim_log_set_level(shim_config_log_level(shim_env));
    shim_config_load(&shim_cfg, shim_env, config_warning);
    shim_log_set_level(shim_cfg.log);
    if (getauxval(AT_SECURE) && any_option_set())
        shim_log(SHIM_LOG_WARN, "a privileged program (setuid, setgid or "
                 "capabilities): every CUPOOL_* option is ignored, as the "
                 "environment is its caller's");
    else
        shim_config_unknown(environ, config_warning);
    stats_file_check();
    if (shim_cfg.disable) {
        shim_log(SHIM_LOG_INFO, "disabled by CUPOOL_DISABLE: every call "
                 "passes through");
        return;
    }
    shim_group_join(); /* before any budget is used: no pool exists yet */
    shim_comm_on_first_call(shim_work_nccl_call);
    shim_comm_on_pay(shim_fence_pay);
    int err = shim_doorbell_open();
    if (!err) {
        int sigs[] = {shim_cfg.flush_signal, shim_cfg.stats_signal};
        shim_signals_take(sigs, 2, shim_doorbell_wr());
        shim_on_first_pool(helper_start);
        if (*shim_cfg.trace) {
            shim_trace_open(shim_cfg.trace, shim_cfg.trace_max);
            if (shim_tracing())
                install_term();
        }
    } else {
        shim_log(SHIM_LOG_WARN, "no pipe for signals: %s", strerror(-err));
    }
    pthread_atfork(NULL, NULL, after_fork_child);
    shim_set_active(true);
}
