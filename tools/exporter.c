/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exporter.c - cupool exporter: every process under cupool on this node
 * (node/node.h) in Prometheus's text exposition format, over HTTP.
 *
 *   cupool-exporter [--listen ADDR:PORT] [--page-dir DIR]... [--once]
 *
 * Serves GET /metrics on ADDR:PORT (127.0.0.1:9464 by default; another
 * address only when given, said in a line). --once writes one scrape to
 * stdout and exits (for node_exporter's textfile directory). A scrape reads
 * pages only: it asks nothing of any process. One connection at a time,
 * each given 2 s to send its request and take the answer, so a slow client
 * delays the next scrape by at most that.
 */
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "node.h"

enum { MAX_DIRS = 16 };

static const char usage_text[] =
    "usage: cupool exporter [--listen ADDR:PORT] [--page-dir DIR]... [--once]\n"
    "  Serves every process under cupool on this node (run as root; a user sees\n"
    "  their own) in Prometheus's format at http://ADDR:PORT/metrics.\n"
    "  --listen ADDR:PORT  where to listen (default 127.0.0.1:9464; [::1]:9464 for\n"
    "                      IPv6); an address other than loopback only when given\n"
    "  --page-dir DIR      a page directory to look in, in every mount namespace\n"
    "                      (repeatable; default /dev/shm and /tmp)\n"
    "  --once              write one scrape to stdout and exit\n";

/* Counters across scrapes. */
static uint64_t scrapes, skipped_total[NODE_SKIPS];

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* A growing text buffer. */
typedef struct text {
    char *s;
    size_t n, cap;
    bool failed;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text *t, const char *fmt, ...)
{
    for (int round = 0; round < 2 && !t->failed; round++) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s ? t->s + t->n : NULL, t->s ? t->cap - t->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0)
            break;
        if (t->s && (size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = (t->cap + (size_t)k + 1) * 2;
        char *s = realloc(t->s, cap);
        if (!s)
            t->failed = true;
        else
            t->s = s, t->cap = cap;
    }
}

/* The per-process series: every statistic with its labels. */
static void add_processes(text *t, const node_scan *s)
{
    const stats_view **v = calloc(s->nprocs + 1, sizeof(*v));
    char **extra = calloc(s->nprocs + 1, sizeof(*extra));
    char *labels = calloc(s->nprocs + 1, 1024);
    if (!v || !extra || !labels) {
        t->failed = true;
    } else {
        for (size_t i = 0; i < s->nprocs; i++) {
            v[i] = &s->procs[i].view;
            extra[i] = labels + i * 1024;
            node_labels(&s->procs[i], extra[i], 1024);
        }
        /* Formatted once into room guessed large enough (16 KiB a
         * process, about 9 KiB written), a second time only if it was not. */
        size_t room = (s->nprocs + 2) * 16 * 1024;
        for (int round = 0; round < 2 && !t->failed; round++) {
            if (t->cap - t->n < room) {
                char *grown = realloc(t->s, t->n + room);
                if (!grown) {
                    t->failed = true;
                    break;
                }
                t->s = grown, t->cap = t->n + room;
            }
            size_t need = stats_format_prometheus_with(v, (const char *const *)extra,
                                                       s->nprocs, t->s + t->n, room);
            if (need < room) {
                t->n += need;
                break;
            }
            room = need + 1;
        }
    }
    free(v);
    free(extra);
    free(labels);
}

/* Device totals over every process, so that a dashboard adds nothing. */
static void add_devices(text *t, const node_scan *s)
{
    static const struct { const char *name, *help; size_t off; } sums[] = {
        {"reserved_bytes", "bytes every process under cupool reserves on the device",
         offsetof(stats_device, reserved)},
        {"allocated_bytes", "bytes allocated to the programs on the device",
         offsetof(stats_device, allocated)},
        {"cached_bytes", "bytes cached (free in the pools) on the device",
         offsetof(stats_device, cached)},
    };
    for (size_t f = 0; f < sizeof(sums) / sizeof(sums[0]) + 1; f++) {
        bool procs = f == sizeof(sums) / sizeof(sums[0]);
        const char *name = procs ? "processes" : sums[f].name;
        text_add(t, "# HELP cupool_node_%s %s\n# TYPE cupool_node_%s gauge\n", name,
                 procs ? "processes under cupool using the device" : sums[f].help, name);
        for (int dev = 0; dev < STATS_MAX_DEVICES; dev++) {
            uint64_t sum = 0;
            bool used = false;
            for (size_t i = 0; i < s->nprocs; i++)
                for (uint32_t k = 0; k < s->procs[i].view.ndevices; k++) {
                    const stats_device *d = &s->procs[i].view.dev[k];
                    if (d->device != dev)
                        continue;
                    used = true;
                    sum += procs ? 1 : *(const uint64_t *)((const char *)d + sums[f].off);
                }
            if (used)
                text_add(t, "cupool_node_%s{device=\"%d\"} %lu\n", name, dev,
                         (unsigned long)sum);
        }
    }
}

/* The exporter's own figures. */
static void add_self(text *t, const node_scan *s, double seconds)
{
    text_add(t, "# HELP cupool_exporter_pages_skipped_total pages found but not counted, by "
                "reason (a page that vanishes or lies mid-scrape is skipped, never a failed "
                "scrape)\n# TYPE cupool_exporter_pages_skipped_total counter\n");
    for (int r = 0; r < NODE_SKIPS; r++) {
        skipped_total[r] += s->skipped[r];
        text_add(t, "cupool_exporter_pages_skipped_total{reason=\"%s\"} %lu\n",
                 node_skip_name((enum node_skip)r), (unsigned long)skipped_total[r]);
    }
    text_add(t, "# HELP cupool_exporter_processes processes under cupool this scrape saw\n"
                "# TYPE cupool_exporter_processes gauge\ncupool_exporter_processes %zu\n",
             s->nprocs);
    text_add(t, "# HELP cupool_exporter_scrape_duration_seconds how long this scrape took\n"
                "# TYPE cupool_exporter_scrape_duration_seconds gauge\n"
                "cupool_exporter_scrape_duration_seconds %.6f\n", seconds);
    text_add(t, "# HELP cupool_exporter_scrapes_total scrapes served\n"
                "# TYPE cupool_exporter_scrapes_total counter\n"
                "cupool_exporter_scrapes_total %lu\n", (unsigned long)++scrapes);
}

/* One scrape into t. */
static void scrape(text *t, const char *const *dirs, size_t ndirs)
{
    double t0 = mono_s();
    node_scan s;
    if (node_scan_run(&s, ndirs ? dirs : NULL, ndirs) == -ENOMEM)
        t->failed = true;
    add_processes(t, &s);
    add_devices(t, &s);
    add_self(t, &s, mono_s() - t0);
    node_scan_free(&s);
}

/* ---- HTTP -------------------------------------------------------------------- */

/* Whether host names the loopback interface. */
static bool loopback(const char *host)
{
    return !strcmp(host, "127.0.0.1") || !strcmp(host, "::1") || !strcmp(host, "localhost") ||
           !strncmp(host, "127.", 4);
}

/* Splits ADDR:PORT ([V6]:PORT) into host and port. 0 or -EINVAL. */
static int split_listen(const char *arg, char *host, size_t hlen, char *port, size_t plen)
{
    const char *colon = strrchr(arg, ':');
    if (!colon || !colon[1] || colon == arg)
        return -EINVAL;
    const char *h = arg;
    size_t n = (size_t)(colon - arg);
    if (arg[0] == '[') {
        if (colon[-1] != ']')
            return -EINVAL;
        h++, n -= 2;
    }
    if (n + 1 > hlen || strlen(colon + 1) + 1 > plen)
        return -EINVAL;
    memcpy(host, h, n);
    host[n] = '\0';
    snprintf(port, plen, "%s", colon + 1);
    return 0;
}

/* A listening socket on host:port, or -1 after saying why. */
static int listen_on(const char *host, const char *port)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV}, *ai;
    int e = getaddrinfo(host, port, &hints, &ai);
    if (e) {
        fprintf(stderr, "cupool exporter: cannot listen on %s:%s: %s\n", host, port,
                gai_strerror(e));
        return -1;
    }
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0), on = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 16)) {
        fprintf(stderr, "cupool exporter: cannot listen on %s:%s: %s\n", host, port,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        s += k, n -= (size_t)k;
    }
}

static void reply(int fd, const char *status, const char *type, const char *body, size_t n)
{
    char head[256];
    int k = snprintf(head, sizeof(head), "HTTP/1.1 %s\r\nContent-Type: %s\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n", status, type, n);
    send_all(fd, head, (size_t)k);
    send_all(fd, body, n);
}

/* Answers one connection: GET /metrics, a pointer to it at /, else 404. */
static void serve_one(int fd, const char *const *dirs, size_t ndirs)
{
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char req[8192];
    size_t n = 0;
    while (n < sizeof(req) - 1) {
        ssize_t k = recv(fd, req + n, sizeof(req) - 1 - n, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
        req[n] = '\0';
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n"))
            break;
    }
    req[n] = '\0';
    char method[8] = "", path[256] = "";
    if (sscanf(req, "%7s %255s", method, path) != 2 || strcmp(method, "GET")) {
        reply(fd, "405 Method Not Allowed", "text/plain", "GET only\n", 9);
        return;
    }
    path[strcspn(path, "?")] = '\0';
    if (!strcmp(path, "/metrics")) {
        text t = {0};
        scrape(&t, dirs, ndirs);
        if (t.failed)
            reply(fd, "500 Internal Server Error", "text/plain", "out of memory\n", 14);
        else
            reply(fd, "200 OK", "text/plain; version=0.0.4; charset=utf-8", t.s, t.n);
        free(t.s);
    } else if (!strcmp(path, "/")) {
        static const char page[] = "<html><body><a href=\"/metrics\">metrics</a></body></html>\n";
        reply(fd, "200 OK", "text/html", page, sizeof(page) - 1);
    } else {
        reply(fd, "404 Not Found", "text/plain", "not found\n", 10);
    }
}

int main(int argc, char **argv)
{
    const char *listen_arg = "127.0.0.1:9464", *dirs[MAX_DIRS];
    size_t ndirs = 0;
    bool once = false, given = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage_text, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--once")) {
            once = true;
        } else if (!strcmp(argv[i], "--listen") && i + 1 < argc) {
            listen_arg = argv[++i], given = true;
        } else if (!strcmp(argv[i], "--page-dir") && i + 1 < argc && ndirs < MAX_DIRS) {
            dirs[ndirs++] = argv[++i];
        } else {
            fprintf(stderr, "cupool exporter: unknown option '%s'\n%s", argv[i], usage_text);
            return 2;
        }
    }
    if (once) {
        text t = {0};
        scrape(&t, dirs, ndirs);
        if (!t.failed)
            fwrite(t.s, 1, t.n, stdout);
        free(t.s);
        return t.failed ? 1 : 0;
    }
    char host[256], port[16];
    if (split_listen(listen_arg, host, sizeof(host), port, sizeof(port))) {
        fprintf(stderr, "cupool exporter: --listen takes ADDR:PORT ([ADDR]:PORT for IPv6), "
                        "not '%s'\n", listen_arg);
        return 2;
    }
    if (given && !loopback(host))
        fprintf(stderr, "cupool exporter: listening on %s, beyond this machine: whoever "
                        "reaches it reads every process's figures and labels\n", listen_arg);
    int lfd = listen_on(host, port);
    if (lfd < 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    fprintf(stderr, "cupool exporter: serving http://%s/metrics\n", listen_arg);
    for (;;) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE)
                continue;
            fprintf(stderr, "cupool exporter: accept: %s\n", strerror(errno));
            return 1;
        }
        serve_one(c, dirs, ndirs);
        close(c);
    }
}
