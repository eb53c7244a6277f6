/* SPDX-License-Identifier: Apache-2.0 */
/*
 * exporter.c - cupool exporter: every process under cupool on this node
 * (node/node.h) in Prometheus's text exposition format, over HTTP.
 *
 *   cupool-exporter [--listen ADDR:PORT] [--page-dir DIR]... [--devices N]
 *                   [--max-answer SIZE] [--once]
 *
 * Serves GET /metrics on ADDR:PORT (127.0.0.1:9464 by default; another
 * address only when given, said in a line), or on the listening socket
 * systemd hands in (socket activation: a port bound at boot, before any
 * user could take it). --once writes one scrape to stdout and exits (for
 * node_exporter's textfile directory). A scrape reads pages only: it asks
 * nothing of any process. The scrape itself is exporter_scrape.c's.
 *
 * The HTTP side is libmicrohttpd's, in one thread (its epoll loop, run
 * here): no client can hold it. It reads at most 16 KiB of a request (a
 * longer request line or headers is refused), takes GET without a body
 * only, answers each request on a connection of its own (Connection:
 * close). Beyond what libmicrohttpd bounds (an idle connection's 2 s), this
 * file bounds each connection as a whole: one that has not delivered its
 * request within 2 s of its start, however slowly it trickles in, or still
 * holds its answer 10 s after its start, is shut down; when connections
 * near the limit, the oldest still sending its request is shut down for
 * each new one, so that a flood of idle connections never keeps a scrape
 * waiting nor cuts one being answered. Scrapes within
 * 1 s of each other share one answer, so that a flood of requests scans
 * the node at most once a second and slow readers hold at most one answer
 * a second between them.
 */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "clock.h"
#include "exporter_scrape.h"
#include "gpus.h"
#include "stats.h"

enum {
    MAX_DIRS = 16,
    CONN_MAX = 1024,          /* connections at once (fewer if descriptors are fewer) */
    CONN_SPARE = 32,          /* kept free by shutting down the oldest */
    REQUEST_BYTES = 16 * 1024, /* a connection's memory: request line, headers, answer's head */
    SEND_BUFFER = 64 * 1024   /* the kernel's send buffer (it doubles it) */
};
static const double request_deadline_s = 2.0, exchange_deadline_s = 10.0, reuse_s = 1.0;

static const char usage_text[] =
    "usage: cupool exporter [--listen ADDR:PORT] [--page-dir DIR]... [--devices N]\n"
    "                       [--max-answer SIZE] [--once]\n"
    "  Serves every process under cupool on this node (run as root; a user sees\n"
    "  their own) in Prometheus's format at http://ADDR:PORT/metrics.\n"
    "  --listen ADDR:PORT  where to listen (default 127.0.0.1:9464; [::1]:9464 for\n"
    "                      IPv6; port 0: any free one, printed); an address other\n"
    "                      than loopback only when given. A socket handed in by\n"
    "                      systemd (LISTEN_FDS) is served instead\n"
    "  --page-dir DIR      serve only the processes whose page lies in DIR, as\n"
    "                      each sees it (repeatable; default: every process)\n"
    "  --devices N         the node's GPUs (default: counted from /dev/nvidiaN and\n"
    "                      /proc/driver/nvidia/gpus); a page's devices from N on\n"
    "                      are not shown\n"
    "  --max-answer SIZE   the most one answer may hold (default 16M); processes\n"
    "                      past it are left out, and counted\n"
    "  --once              write one scrape to stdout and exit\n";

/* ---- connections ------------------------------------------------------------ */

/* A connection, from its start, in the order they started. */
typedef struct conn {
    struct conn *prev, *next;
    int fd;
    double start;
    bool asked;               /* its request came in whole */
    bool listed;              /* in the list: not yet shut down */
} conn;

typedef struct server {
    exporter_opts opts;
    conn *head, *tail;        /* oldest first */
    size_t nlisted, spare_at; /* the oldest is shut down past spare_at */
    struct MHD_Response *latest;
    double latest_at;
} server;

static void conn_unlink(server *sv, conn *k)
{
    if (!k->listed)
        return;
    *(k->prev ? &k->prev->next : &sv->head) = k->next;
    *(k->next ? &k->next->prev : &sv->tail) = k->prev;
    k->listed = false;
    sv->nlisted--;
}

/* Ends k: libmicrohttpd sees the socket shut and closes the connection
 * itself (which it tells notify about before it closes the descriptor).
 * Lingering off, the close resets the connection: what the kernel still
 * holds of the answer is dropped, not left for a slow reader to take. */
static void conn_shut(server *sv, conn *k)
{
    struct linger off = {1, 0};
    conn_unlink(sv, k);
    setsockopt(k->fd, SOL_SOCKET, SO_LINGER, &off, sizeof(off));
    shutdown(k->fd, SHUT_RDWR);
}

/* The connection to give way for a new one: the oldest still sending its
 * request, so that a flood of idle ones never takes the place of one being
 * answered; the oldest of all when every one is being answered. */
static conn *conn_oldest(server *sv)
{
    for (conn *k = sv->head; k; k = k->next)
        if (!k->asked)
            return k;
    return sv->head;
}

static void notify(void *cls, struct MHD_Connection *c, void **socket_context,
                   enum MHD_ConnectionNotificationCode code)
{
    server *sv = cls;
    conn *k = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (k)
            conn_unlink(sv, k);
        free(k);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD);
    k = calloc(1, sizeof(*k));
    if (!k || !ci) {
        free(k);
        return; /* untracked: libmicrohttpd's idle timeout still ends it */
    }
    /* What the kernel takes of an answer at once: the rest stays with the
     * connection, so a reader too slow for its deadline is cut off, not
     * left the kernel's copy of a whole answer to take for ever. */
    int sndbuf = SEND_BUFFER;
    setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    *k = (conn){sv->tail, NULL, ci->connect_fd, clock_mono_s(), false, true};
    *(sv->tail ? &sv->tail->next : &sv->head) = k;
    sv->tail = k;
    sv->nlisted++;
    *socket_context = k;
    while (sv->nlisted > sv->spare_at && sv->head != k)
        conn_shut(sv, conn_oldest(sv));
}

/* Shuts down every connection past its deadline. */
static void conn_sweep(server *sv)
{
    double now = clock_mono_s();
    for (conn *k = sv->head, *next; k; k = next) {
        next = k->next;
        if (now - k->start > (k->asked ? exchange_deadline_s : request_deadline_s))
            conn_shut(sv, k);
    }
}

/* ---- answers ---------------------------------------------------------------- */

/* A response for a fixed text, its connection closed after it. */
static struct MHD_Response *fixed(const char *text, const char *type)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
                                                             MHD_RESPMEM_PERSISTENT);
    if (r) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    }
    return r;
}

/* The answer to GET /metrics: the last one if made within reuse_s, else a
 * new scrape's. The server holds one reference; each connection answered
 * holds one until it is done. NULL when out of memory. */
static struct MHD_Response *metrics(server *sv)
{
    double now = clock_mono_s();
    if (sv->latest && now - sv->latest_at < reuse_s)
        return sv->latest;
    char *text;
    size_t n;
    if (exporter_scrape(&sv->opts, &text, &n))
        return NULL;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (sv->latest)
        MHD_destroy_response(sv->latest);
    sv->latest = r, sv->latest_at = now;
    return r;
}

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r, bool own)
{
    if (!r)
        return MHD_NO; /* out of memory: the connection is closed */
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    if (own)
        MHD_destroy_response(r);
    return ok;
}

/* Whether the request says it has a body. */
static bool has_body(struct MHD_Connection *c)
{
    const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                  MHD_HTTP_HEADER_CONTENT_LENGTH);
    return (len && strcmp(len, "0")) ||
           MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

/* libmicrohttpd's request handler, called once a request's line and headers
 * are in: GET /metrics, a pointer to it at /, else 404; anything but a GET
 * without a body is refused at once, its body unread. */
static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **req)
{
    (void)version, (void)upload, (void)upload_size, (void)req;
    server *sv = cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c,
                                                                 MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context)
        ((conn *)ci->socket_context)->asked = true;
    if (strcmp(method, MHD_HTTP_METHOD_GET)) {
        struct MHD_Response *r = fixed("GET only\n", "text/plain");
        if (r)
            MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, MHD_HTTP_METHOD_GET);
        return queue(c, MHD_HTTP_METHOD_NOT_ALLOWED, r, true);
    }
    if (has_body(c))
        return queue(c, MHD_HTTP_CONTENT_TOO_LARGE, fixed("a GET takes no body\n",
                                                          "text/plain"), true);
    if (!strcmp(url, "/metrics"))
        return queue(c, MHD_HTTP_OK, metrics(sv), false);
    if (!strcmp(url, "/"))
        return queue(c, MHD_HTTP_OK, fixed("<html><body><a href=\"/metrics\">metrics</a>"
                                           "</body></html>\n", "text/html"), true);
    return queue(c, MHD_HTTP_NOT_FOUND, fixed("not found\n", "text/plain"), true);
}

/* ---- the listening socket --------------------------------------------------- */

/* Whether host names the loopback interface. */
static bool loopback(const char *host)
{
    return !strcmp(host, "::1") || !strcmp(host, "localhost") || !strncmp(host, "127.", 4);
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
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
        fprintf(stderr, "cupool exporter: cannot listen on %s:%s: %s\n", host, port,
                strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* The socket systemd handed in, by its protocol (sd_listen_fds: LISTEN_PID
 * names this process, LISTEN_FDS counts the sockets from descriptor 3):
 * 3; -1 when none was handed in; -2 after saying why the one handed in
 * cannot be served. The variables are cleared, so no child inherits them. */
static int handed_socket(void)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    char *end;
    if (!pid || !fds || strtol(pid, &end, 10) != getpid() || *end)
        return -1;
    long n = strtol(fds, &end, 10);
    bool one = !*end && n == 1;
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
    int type = 0, listening = 0;
    socklen_t l = sizeof(int), l2 = sizeof(int);
    if (!one || getsockopt(3, SOL_SOCKET, SO_TYPE, &type, &l) || type != SOCK_STREAM ||
        getsockopt(3, SOL_SOCKET, SO_ACCEPTCONN, &listening, &l2) || !listening) {
        fprintf(stderr, "cupool exporter: systemd handed in %s; it serves one listening "
                        "stream socket (ListenStream=, Accept=no)\n",
                one ? "a descriptor 3 that is not a listening stream socket" : "not one socket");
        return -2;
    }
    fcntl(3, F_SETFD, FD_CLOEXEC);
    return 3;
}

/* fd's address as ADDR:PORT ([V6]:PORT), the port really bound. */
static void bound_address(int fd, char *out, size_t len)
{
    struct sockaddr_storage a;
    socklen_t al = sizeof(a);
    char host[128] = "?", port[16] = "?";
    if (!getsockname(fd, (struct sockaddr *)&a, &al))
        getnameinfo((struct sockaddr *)&a, al, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(out, len, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
}

/* ---- main ------------------------------------------------------------------- */

typedef struct options {
    exporter_opts scrape;
    const char *dirs[MAX_DIRS];
    const char *listen;
    bool given, once;
} options;

/* Parses argv into o: 0, or the exit status (help printed, or a bad
 * option said). */
static int parse_args(int argc, char **argv, options *o)
{
    static const args_cmd cmd = {"cupool", "exporter", usage_text};
    const char *devices = NULL, *max = "16M";
    if (args_wants_help(argc - 1, argv + 1)) {
        fputs(usage_text, stdout);
        return 1;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool valued = !strcmp(a, "--listen") || !strcmp(a, "--page-dir") ||
                      !strcmp(a, "--devices") || !strcmp(a, "--max-answer");
        if (valued && !v)
            return args_mistake(&cmd, "%s needs a value", a);
        if (!strcmp(a, "--once")) {
            o->once = true;
        } else if (!strcmp(a, "--listen") && v) {
            o->listen = v, o->given = true, i++;
        } else if (!strcmp(a, "--page-dir") && v && o->scrape.ndirs < MAX_DIRS) {
            o->dirs[o->scrape.ndirs++] = v, i++;
        } else if (!strcmp(a, "--devices") && v) {
            devices = v, i++;
        } else if (!strcmp(a, "--max-answer") && v) {
            max = v, i++;
        } else {
            return args_unexpected(&cmd, a);
        }
    }
    o->scrape.dirs = o->dirs;
    char *end = NULL;
    long n = devices ? strtol(devices, &end, 10) : node_gpus_count();
    if (!devices && n > STATS_MAX_DEVICES)
        n = STATS_MAX_DEVICES;
    if (devices && (*end || end == devices || n < 0 || n > STATS_MAX_DEVICES))
        return args_mistake(&cmd, "--devices takes 0 to %d, not '%s'", STATS_MAX_DEVICES,
                            args_shown(devices));
    o->scrape.devices = (int)n;
    uint64_t answer = 0;
    if (stats_parse_size(max, &answer) || answer < 256 * 1024 || answer > SIZE_MAX)
        return args_mistake(&cmd, "--max-answer takes a size of at least 256K (16M, 64M), "
                            "not '%s'", args_shown(max));
    o->scrape.max_answer = (size_t)answer;
    if (!n && !devices)
        fprintf(stderr, "cupool exporter: no NVIDIA GPU found (/dev/nvidiaN, "
                        "/proc/driver/nvidia/gpus): pages' device series are left out "
                        "(--devices N to say how many there are)\n");
    return 0;
}

/* The listening socket: systemd's, or one bound to o->listen; after
 * saying why there is none, -2 for a bad --listen, else -1. */
static int listening_socket(const options *o)
{
    int fd = handed_socket();
    if (fd >= 0 && o->given) {
        fprintf(stderr, "cupool exporter: --listen given beside the socket systemd "
                        "handed in; drop one\n");
        return -2;
    }
    if (fd != -1)
        return fd < 0 ? -1 : fd;
    char host[256], port[16];
    if (split_listen(o->listen, host, sizeof(host), port, sizeof(port))) {
        fprintf(stderr, "cupool exporter: --listen takes ADDR:PORT ([ADDR]:PORT for IPv6), "
                        "not '%s'\n", o->listen);
        return -2;
    }
    if (o->given && !loopback(host))
        fprintf(stderr, "cupool exporter: listening on %s, beyond this machine: whoever "
                        "reaches it reads every process's figures and labels\n", o->listen);
    return listen_on(host, port);
}

/* Room for the connections: the descriptor limit raised to its hard
 * limit; how many connections that allows. */
static unsigned conn_room(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r))
        return 64;
    if (r.rlim_cur < r.rlim_max && r.rlim_cur < CONN_MAX + 64) {
        r.rlim_cur = r.rlim_max < CONN_MAX + 64 ? r.rlim_max : CONN_MAX + 64;
        setrlimit(RLIMIT_NOFILE, &r);
    }
    rlim_t room = r.rlim_cur > 64 + CONN_SPARE * 2 ? r.rlim_cur - 64 : CONN_SPARE * 2;
    return room < CONN_MAX ? (unsigned)room : CONN_MAX;
}

static int serve(server *sv, int fd)
{
    unsigned limit = conn_room();
    sv->spare_at = limit - CONN_SPARE;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_EPOLL, 0, NULL, NULL, answer, sv, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_CONNECTION_LIMIT, limit, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)request_deadline_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)REQUEST_BYTES, MHD_OPTION_NOTIFY_CONNECTION, notify, sv, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "cupool exporter: libmicrohttpd would not start on the socket\n");
        return 1;
    }
    char addr[160];
    bound_address(fd, addr, sizeof(addr));
    fprintf(stderr, "cupool exporter: serving http://%s/metrics\n", addr);
    for (;;) {
        if (MHD_run_wait(d, 100) == MHD_NO && errno != EINTR) {
            fprintf(stderr, "cupool exporter: libmicrohttpd's loop failed: %s\n",
                    strerror(errno));
            MHD_stop_daemon(d);
            return 1;
        }
        conn_sweep(sv);
    }
}

int main(int argc, char **argv)
{
    options o = {.listen = "127.0.0.1:9464"};
    int r = parse_args(argc, argv, &o);
    if (r)
        return r == 1 ? 0 : r;
    if (o.once) {
        char *text;
        size_t n;
        if (exporter_scrape(&o.scrape, &text, &n))
            return 1;
        fwrite(text, 1, n, stdout);
        free(text);
        return 0;
    }
    int fd = listening_socket(&o);
    if (fd < 0)
        return fd == -2 ? 2 : 1;
    signal(SIGPIPE, SIG_IGN);
    server sv = {.opts = o.scrape};
    return serve(&sv, fd);
}
