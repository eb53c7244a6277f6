/*
 * control.c - see control.h.
 *
 * Signals: installed with sigaction at load, the previous handler kept and
 * chained (unless it was the default or ignore). The handler saves errno,
 * writes the signal number as one byte to a non-blocking pipe and restores
 * errno: nothing else is async-signal-safe enough. The helper thread starts
 * with the first pool; it reads the pipe and flushes or dumps statistics
 * with the pools' locks taken the ordinary way.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "control.h"
#include "device.h"
#include "log.h"

static atomic_bool active;
static _Atomic uint64_t counters[SHIM_NCOUNTERS];
static int pipe_fd[2] = {-1, -1};
static struct sigaction previous[2];
static int handled[2];
static pthread_once_t helper_once = PTHREAD_ONCE_INIT;

bool shim_active(void) { return atomic_load_explicit(&active, memory_order_relaxed); }

void shim_count(enum shim_counter c) { shim_count_add(c, 1); }

void shim_count_add(enum shim_counter c, uint64_t n)
{
    atomic_fetch_add_explicit(&counters[c], n, memory_order_relaxed);
}

/* ---- signals -------------------------------------------------------------- */

static void on_signal(int sig, siginfo_t *info, void *uctx)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t w = write(pipe_fd[1], &b, 1);
    (void)w;
    for (int i = 0; i < 2; i++) {
        if (handled[i] != sig)
            continue;
        const struct sigaction *p = &previous[i];
        if (p->sa_flags & SA_SIGINFO) {
            if (p->sa_sigaction)
                p->sa_sigaction(sig, info, uctx);
        } else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN) {
            p->sa_handler(sig);
        }
    }
    errno = saved;
}

static void install(int slot, int sig)
{
    if (!sig)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, &previous[slot]) == 0)
        handled[slot] = sig;
    else
        shim_log(SHIM_LOG_WARN, "cannot handle signal %d: %s", sig,
                 strerror(errno));
}

/* ---- statistics ------------------------------------------------------------ */

static size_t append(char *buf, size_t len, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static size_t append(char *buf, size_t len, size_t n, const char *fmt, ...)
{
    if (n >= len)
        return n;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + n, len - n, fmt, ap);
    va_end(ap);
    return k < 0 ? n : n + (size_t)k;
}

static size_t device_json(char *buf, size_t len, size_t n, int dev,
                          const pool_stats *s)
{
    n = append(buf, len, n, "{\"device\":%d,\"cap\":%lu,\"syncs\":%lu", dev,
               (unsigned long)shim_devices[dev].cap,
               (unsigned long)atomic_load(&shim_devices[dev].syncs));
#define X_GAUGE(name, doc)                                                    \
    n = append(buf, len, n, ",\"" #name "\":%lu,\"" #name "_peak\":%lu",      \
               (unsigned long)s->name, (unsigned long)s->name##_peak);
#define X_COUNTER(name, doc)                                                  \
    n = append(buf, len, n, ",\"" #name "\":%lu", (unsigned long)s->name);
    POOL_GAUGES(X_GAUGE)
    POOL_COUNTERS(X_COUNTER)
#undef X_GAUGE
#undef X_COUNTER
    return append(buf, len, n, ",\"largest_free\":%lu,\"free_blocks\":%lu,"
                  "\"segments\":%lu}", (unsigned long)s->largest_free,
                  (unsigned long)s->free_blocks, (unsigned long)s->segments);
}

size_t shim_stats_json(char *buf, size_t len)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    size_t n = append(buf, len, 0, "{\"cupool\":1,\"pid\":%d,\"time\":%ld.%03ld,"
                      "\"devices\":[", (int)getpid(), (long)t.tv_sec,
                      t.tv_nsec / 1000000);
    bool first = true;
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        pool *p = shim_device_pool_if_any(i);
        if (!p)
            continue;
        pool_stats s;
        pool_stats_get(p, &s);
        n = append(buf, len, n, first ? "" : ",");
        n = device_json(buf, len, n, i, &s);
        first = false;
    }
    n = append(buf, len, n, "]");
#define X_COUNT(id, name, doc)                                                \
    n = append(buf, len, n, ",\"" #name "\":%lu",                             \
               (unsigned long)atomic_load(&counters[SHIM_##id]));
    SHIM_COUNTER_LIST(X_COUNT)
#undef X_COUNT
    return append(buf, len, n, "}\n");
}

/* Opens CUPOOL_STATS_FILE (with %p replaced by the pid) or stderr. */
static int stats_fd(void)
{
    const char *pat = shim_cfg.stats_file;
    if (!*pat)
        return STDERR_FILENO;
    char path[SHIM_PATH_MAX + 32];
    size_t n = 0;
    for (const char *c = pat; *c && n + 24 < sizeof(path); c++) {
        if (c[0] == '%' && c[1] == 'p') {
            n += (size_t)snprintf(path + n, sizeof(path) - n, "%d", (int)getpid());
            c++;
        } else {
            path[n++] = *c;
        }
    }
    path[n] = '\0';
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
        shim_log(SHIM_LOG_WARN, "cannot open CUPOOL_STATS_FILE %s: %s; "
                 "writing to stderr", path, strerror(errno));
    return fd < 0 ? STDERR_FILENO : fd;
}

static void dump_stats(void)
{
    char buf[16384];
    size_t n = shim_stats_json(buf, sizeof(buf));
    if (n >= sizeof(buf))
        n = sizeof(buf) - 1;
    int fd = stats_fd();
    ssize_t w = write(fd, buf, n);
    (void)w;
    if (fd != STDERR_FILENO)
        close(fd);
}

/* ---- helper thread -------------------------------------------------------- */

static void *helper(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    for (;;) {
        unsigned char b;
        ssize_t r = read(pipe_fd[0], &b, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return NULL;
        if (b == shim_cfg.flush_signal) {
            uint64_t n = shim_device_flush_all();
            shim_count(SHIM_SIGNAL_FLUSHES);
            shim_count_add(SHIM_FLUSHED_BYTES, n);
            char h[32];
            shim_log(SHIM_LOG_WARN, "flush: returned %s to the driver",
                     shim_fmt_bytes(n, h, sizeof(h)));
        } else if (b == shim_cfg.stats_signal) {
            dump_stats();
        }
    }
}

static void helper_spawn(void)
{
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, helper, NULL) != 0)
        shim_log(SHIM_LOG_ERROR, "cannot start the helper thread: signals "
                 "will not flush or dump statistics");
    pthread_attr_destroy(&a);
}

void shim_helper_start(void)
{
    if (pipe_fd[0] >= 0)
        pthread_once(&helper_once, helper_spawn);
}

/* ---- out-of-memory report ------------------------------------------------- */

void shim_report_alloc_failure(int dev, size_t size, int err)
{
    shim_count(SHIM_OOM_REPORTS);
    char rq[32];
    shim_fmt_bytes(size, rq, sizeof(rq));
    if (err != -ENOMEM && err != -EDQUOT) {
        shim_log(SHIM_LOG_ERROR, "device %d: cudaMalloc(%s) failed: %s", dev,
                 rq, err == -EOVERFLOW ? "size too large" : pool_strerror(err));
        return;
    }
    pool *p = shim_device_pool_if_any(dev);
    pool_stats s;
    pool_stats_get(p, &s);
    size_t dfree = 0, dtotal = 0;
    if (shim_real.cudaMemGetInfo(&dfree, &dtotal) != cudaSuccess)
        shim_real.cudaGetLastError();
    uint64_t cap = shim_devices[dev].cap;
    char c[32], r[32], a[32], f[32], l[32], d[32];
    shim_fmt_bytes(cap, c, sizeof(c));
    shim_fmt_bytes(s.reserved, r, sizeof(r));
    shim_fmt_bytes(s.allocated, a, sizeof(a));
    shim_fmt_bytes(s.cached, f, sizeof(f));
    shim_fmt_bytes(s.largest_free, l, sizeof(l));
    shim_fmt_bytes(dfree, d, sizeof(d));
    /* Fragmentation: the bytes exist (cached, or under the cap) but no
     * free block is large enough and the pool may not grow. */
    bool frag = s.cached >= size ||
                (err == -EDQUOT && cap > s.allocated && cap - s.allocated >= size);
    const char *cause =
        frag ? "fragmentation: enough memory is free in total, but no free "
               "block is large enough and no new segment fits"
        : err == -EDQUOT ? "the cap: allocated memory plus this request "
                           "exceeds CUPOOL_MAX_RESERVED"
                         : "the device is out of memory";
    shim_log(SHIM_LOG_ERROR,
             "out of memory on device %d: cudaMalloc(%s) failed\n"
             "  cap %s, reserved %s, allocated %s, cached free %s\n"
             "  largest free block %s, %lu free blocks, %lu segments, "
             "device free %s\n"
             "  cause: %s", dev, rq, cap ? c : "none", r, a, f, l,
             (unsigned long)s.free_blocks, (unsigned long)s.segments, d, cause);
}

/* ---- life cycle ----------------------------------------------------------- */

static char pending[8][512];
static int npending;

static void hold_warning(const char *line)
{
    if (npending < 8)
        snprintf(pending[npending++], sizeof(pending[0]), "%s", line);
}

static void after_fork_child(void)
{
    /* The child must not touch the parent's CUDA state. */
    atomic_store(&active, false);
}

static const char *env(const char *name) { return getenv(name); }

__attribute__((constructor(102))) static void shim_init(void)
{
    shim_config_load(&shim_cfg, env, hold_warning);
    shim_log_set_level(shim_cfg.log);
    for (int i = 0; i < npending; i++)
        shim_log(SHIM_LOG_ERROR, "%s", pending[i]);
    if (shim_cfg.disable) {
        shim_log(SHIM_LOG_INFO, "disabled by CUPOOL_DISABLE: every call "
                 "passes through");
        return;
    }
    if (pipe2(pipe_fd, O_CLOEXEC) == 0) {
        fcntl(pipe_fd[1], F_SETFL, O_NONBLOCK);
        install(0, shim_cfg.flush_signal);
        install(1, shim_cfg.stats_signal);
    } else {
        shim_log(SHIM_LOG_WARN, "no pipe for signals: %s", strerror(errno));
    }
    pthread_atfork(NULL, NULL, after_fork_child);
    atomic_store(&active, true);
}
