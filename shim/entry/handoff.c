/* SPDX-License-Identifier: Apache-2.0 */
/*
 * handoff.c - see handoff.h.
 *
 * One SOCK_SEQPACKET socket per exporting process, so that each message
 * (a request, an answer, a batch of descriptors with their lengths) is
 * read whole or not at all. The exporter's thread answers one request at
 * a time, each message within TIMEOUT_S and the whole answer within
 * DEADLINE_S: an importer that stalls delays the next by that much at
 * most.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "handoff.h"
#include "log.h"

#define REQUEST_MAGIC "cupoolR\001"
enum {
    BATCH = 32,          /* descriptors a message (SCM_MAX_FD is 253) */
    TIMEOUT_S = 5,       /* for each send and receive, on both sides */
    DEADLINE_S = 30,     /* for a whole answer */
    MAX_PIECES = 1 << 20 /* 2 TiB in 2 MiB pieces: more is a lie */
};

typedef struct request {
    char magic[8];
    uint32_t slot, zero;
    uint64_t nonce;
} request;

typedef struct answer {
    int32_t err; /* 0 or a negative errno */
    uint32_t n;  /* pieces to follow, in batches of BATCH */
    uint64_t skip, span;
} answer;

/* The socket's name for process pid with token, in the abstract
 * namespace. */
static socklen_t name_of(int pid, uint64_t token, struct sockaddr_un *a)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    int len = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "cupool-ipc-%d-%016llx",
                       pid, (unsigned long long)token);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

static void set_timeouts(int fd)
{
    struct timeval tv = {TIMEOUT_S, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* The process at the other end, as the kernel saw it connect or listen. */
static bool peer_of(int fd, struct ucred *c)
{
    socklen_t len = sizeof(*c);
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, c, &len) == 0 && len == sizeof(*c);
}

/* One whole message of exactly len bytes: 0 or a negative errno. */
static int send_msg(int fd, const void *p, size_t len)
{
    ssize_t s;
    while ((s = send(fd, p, len, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    return s == (ssize_t)len ? 0 : s < 0 ? -errno : -EPROTO;
}

static int recv_msg(int fd, void *p, size_t len)
{
    ssize_t s;
    while ((s = recv(fd, p, len, 0)) < 0 && errno == EINTR)
        ;
    return s == (ssize_t)len ? 0 : s < 0 ? (errno == EAGAIN ? -ETIMEDOUT : -errno) : -EPROTO;
}

/* Sends n pieces, BATCH a message: their lengths, their descriptors. */
static int send_pieces(int fd, const shim_vmm_piece *p, size_t n)
{
    for (size_t at = 0; at < n;) {
        size_t k = n - at < BATCH ? n - at : BATCH;
        uint64_t lens[BATCH];
        union { char buf[CMSG_SPACE(BATCH * sizeof(int))]; struct cmsghdr align; } u;
        memset(&u, 0, sizeof(u));
        struct iovec iov = {lens, k * sizeof(*lens)};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                           .msg_controllen = CMSG_SPACE(k * sizeof(int))};
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(k * sizeof(int));
        for (size_t i = 0; i < k; i++) {
            lens[i] = p[at + i].len;
            memcpy(CMSG_DATA(c) + i * sizeof(int), &p[at + i].fd, sizeof(int));
        }
        ssize_t s;
        while ((s = sendmsg(fd, &m, MSG_NOSIGNAL)) < 0 && errno == EINTR)
            ;
        if (s != (ssize_t)iov.iov_len)
            return s < 0 ? -errno : -EPROTO;
        at += k;
    }
    return 0;
}

/* Receives n pieces as send_pieces sends them; on failure every
 * descriptor received is closed. */
static int recv_pieces(int fd, shim_vmm_piece *p, size_t n)
{
    int err = 0;
    size_t at = 0;
    while (!err && at < n) {
        size_t k = n - at < BATCH ? n - at : BATCH, got = 0;
        uint64_t lens[BATCH];
        union { char buf[CMSG_SPACE(BATCH * sizeof(int))]; struct cmsghdr align; } u;
        struct iovec iov = {lens, sizeof(lens)};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                           .msg_controllen = sizeof(u.buf)};
        ssize_t s;
        while ((s = recvmsg(fd, &m, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
            ;
        for (struct cmsghdr *c = s < 0 ? NULL : CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
                continue;
            size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < nfd; i++) {
                int one;
                memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                if (got < k)
                    p[at + got++] = (shim_vmm_piece){one, 0};
                else
                    close(one); /* more than announced */
            }
        }
        int64_t said;
        memcpy(&said, lens, sizeof(said));
        if (s < 0)
            err = errno == EAGAIN ? -ETIMEDOUT : -errno;
        else if (s == (ssize_t)sizeof(said) && !got && said < 0 && said > -4096)
            err = (int)said; /* the exporter's error, in place of a batch */
        else if (s != (ssize_t)(k * sizeof(*lens)) || got != k ||
                 (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
            err = -EPROTO;
        for (size_t i = 0; i < got; i++)
            p[at + i].len = err ? 0 : lens[i];
        at += got;
    }
    if (err)
        for (size_t i = 0; i < at; i++)
            close(p[i].fd);
    return err;
}

/* ---- the exporter ----------------------------------------------------------- */

static pthread_mutex_t serve_lock = PTHREAD_MUTEX_INITIALIZER;
static const shim_handoff_source *serve_src;
static int listen_fd = -1;
static pid_t listen_pid;     /* the process listen_fd listens for */
static uint64_t listen_token; /* the random part of its name */

/* Sends export l's pieces, a batch at a time, until deadline (seconds of
 * the monotonic clock). */
static void send_all_pieces(int c, const shim_handoff_source *src,
                            const shim_handoff_layout *l, time_t deadline)
{
    for (size_t k = 0; k < l->n;) {
        shim_vmm_piece p[BATCH];
        size_t got = 0;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int err = now.tv_sec > deadline ? -ETIMEDOUT
                  : src->pieces(l, k, p, l->n - k < BATCH ? l->n - k : BATCH, &got);
        if (!err && !got)
            err = -EPROTO; /* fewer than the layout said */
        if (err) { /* said in place of the batch */
            int64_t said = err;
            send_msg(c, &said, sizeof(said));
            return;
        }
        err = send_pieces(c, p, got);
        for (size_t i = 0; i < got; i++)
            close(p[i].fd);
        /* The importer took them: descriptors in flight count against this
         * user's limit, so one batch at a time. */
        char ack;
        if (!err && k + got < l->n)
            err = recv_msg(c, &ack, sizeof(ack));
        if (err)
            return;
        k += got;
    }
}

/* Answers one connection: to this user only, and only a request. */
static void answer_one(int c, const shim_handoff_source *src)
{
    struct ucred cr;
    request rq;
    if (!peer_of(c, &cr) || cr.uid != geteuid())
        return; /* another user's: no answer at all */
    set_timeouts(c);
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    if (recv_msg(c, &rq, sizeof(rq)) || memcmp(rq.magic, REQUEST_MAGIC, sizeof(rq.magic)))
        return;
    shim_handoff_layout l = {0};
    answer a = {src->layout(rq.slot, rq.nonce, &l), 0, 0, 0};
    if (!a.err && (!l.n || l.n > MAX_PIECES || l.skip >= l.span))
        a.err = -E2BIG;
    if (!a.err)
        a.n = (uint32_t)l.n, a.skip = l.skip, a.span = l.span;
    if (!send_msg(c, &a, sizeof(a)) && !a.err)
        send_all_pieces(c, src, &l, start.tv_sec + DEADLINE_S);
}

static void *serve(void *arg)
{
    int fd = (int)(intptr_t)arg;
    for (;;) {
        int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EBADF || errno == EINVAL || errno == ENOTSOCK)
                return NULL; /* closed under it */
            if (errno != EINTR && errno != ECONNABORTED)
                usleep(10000); /* out of descriptors: wait, not spin */
            continue;
        }
        pthread_mutex_lock(&serve_lock);
        const shim_handoff_source *src = serve_src;
        pthread_mutex_unlock(&serve_lock);
        answer_one(c, src);
        close(c);
    }
}

static void before_fork(void) { pthread_mutex_lock(&serve_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&serve_lock); }
/* The child has no thread answering on the parent's socket: it lets go of
 * it (else the parent's name would outlive the parent, answering no one). */
static void after_fork_child(void)
{
    if (listen_fd >= 0)
        close(listen_fd);
    listen_fd = -1;
    pthread_mutex_unlock(&serve_lock);
}

static void watch_forks(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* Binds and listens on a name of this process's with a fresh random
 * token: the descriptor, or a negative errno. */
static int listen_here(uint64_t *token)
{
    if (getrandom(token, sizeof(*token), 0) != (ssize_t)sizeof(*token))
        return -EAGAIN;
    struct sockaddr_un a;
    socklen_t len = name_of(getpid(), *token, &a);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int err = fd < 0 ? -errno
              : bind(fd, (struct sockaddr *)&a, len) || listen(fd, 16) ? -errno : 0;
    if (err && fd >= 0)
        close(fd);
    return err ? err : fd;
}

int shim_handoff_serve(const shim_handoff_source *src, uint64_t *token)
{
    static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
    pthread_once(&atfork_once, watch_forks); /* before the socket is made */
    pthread_mutex_lock(&serve_lock);
    serve_src = src;
    if (listen_fd >= 0 && listen_pid == getpid()) {
        *token = listen_token;
        pthread_mutex_unlock(&serve_lock);
        return 0;
    }
    uint64_t name = 0;
    int fd = listen_here(&name), err = fd < 0 ? fd : 0;
    pthread_t t;
    pthread_attr_t at;
    sigset_t all, old;
    sigfillset(&all);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the thread takes none of the
                                                 program's signals */
    if (!err && (err = -pthread_create(&t, &at, serve, (void *)(intptr_t)fd)) != 0)
        close(fd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    if (!err) {
        listen_fd = fd;
        listen_pid = getpid();
        *token = listen_token = name;
    }
    pthread_mutex_unlock(&serve_lock);
    if (err)
        shim_log(SHIM_LOG_ERROR, "CUDA IPC of memory in VMM segments: cannot listen on "
                 "a socket: %s; such blocks cannot be shared", strerror(-err));
    return err;
}

/* ---- the importer ----------------------------------------------------------- */

/* Connects to pid's socket and checks that pid of this user listens. */
static int connect_to(int pid, uint64_t token, int *out)
{
    struct sockaddr_un a;
    socklen_t len = name_of(pid, token, &a);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    set_timeouts(fd);
    struct ucred cr;
    int err = 0;
    while (!err && connect(fd, (struct sockaddr *)&a, len) != 0)
        err = errno == EINTR ? 0 : errno == EAGAIN ? -ETIMEDOUT : -ECONNREFUSED;
    if (!err && (!peer_of(fd, &cr) || cr.pid != pid || cr.uid != geteuid()))
        err = -EPERM;
    if (err)
        close(fd);
    else
        *out = fd;
    return err;
}

/* Receives the n pieces of an answer into sink, a batch at a time, within
 * the exporter's deadline (and a message's time more). */
static int take_all(int fd, uint32_t n, const shim_handoff_sink *sink)
{
    int err = 0;
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (size_t k = 0; !err && k < n;) {
        shim_vmm_piece p[BATCH];
        size_t got = n - k < BATCH ? n - k : BATCH;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > start.tv_sec + DEADLINE_S + TIMEOUT_S)
            err = -ETIMEDOUT;
        if (err || (err = recv_pieces(fd, p, got)) != 0)
            break;
        err = sink->take(sink->ctx, k, p, got);
        for (size_t i = 0; i < got; i++)
            close(p[i].fd);
        k += got;
        if (!err && k < n)
            err = send_msg(fd, "k", 1); /* taken: the next batch */
    }
    return err;
}

int shim_handoff_fetch(int pid, uint64_t token, uint32_t slot, uint64_t nonce,
                       const shim_handoff_sink *sink)
{
    int fd = -1, err = connect_to(pid, token, &fd);
    if (err)
        return err;
    request rq = {.slot = slot, .nonce = nonce};
    memcpy(rq.magic, REQUEST_MAGIC, sizeof(rq.magic));
    answer a;
    err = send_msg(fd, &rq, sizeof(rq));
    if (!err)
        err = recv_msg(fd, &a, sizeof(a));
    if (!err && a.err)
        err = a.err < 0 && a.err > -4096 ? a.err : -EPROTO;
    if (!err && (!a.n || a.n > MAX_PIECES || a.skip >= a.span))
        err = -EPROTO;
    shim_handoff_layout l = {.n = a.n, .skip = a.skip, .span = a.span};
    if (!err)
        err = sink->begin(sink->ctx, &l);
    if (!err)
        err = take_all(fd, a.n, sink);
    close(fd);
    return err;
}
