/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_handoff.c - file descriptors handed between processes (handoff.c):
 * many pieces in several messages, each batch taken as it comes, the exporter's errors passed on, a
 * socket bound by an impostor under another process's name refused, and a
 * request from another user left unanswered.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "handoff.h"
#include "skip.h"

enum { PIECES = 70, NONCE = 0x5eed, TOKEN = 0x70c3 };

static atomic_int answered; /* calls of layout() */
static size_t npieces = PIECES; /* what layout() says */
static size_t fail_from = SIZE_MAX; /* pieces() fails from this piece on */

/* PIECES memfds, piece i of 4096 * (1 + i % 3) bytes filled with byte i,
 * skip = the slot; -ESTALE for any other nonce, as an export replaced
 * since. */
static int layout(uint32_t slot, uint64_t nonce, shim_handoff_layout *l)
{
    atomic_fetch_add(&answered, 1);
    if (nonce != NONCE)
        return -ESTALE;
    *l = (shim_handoff_layout){npieces, slot, 0, {0}};
    for (size_t i = 0; i < npieces; i++)
        l->span += 4096 * (1 + i % 3);
    return 0;
}

static int pieces(const shim_handoff_layout *l, size_t k, shim_vmm_piece *p, size_t max,
                  size_t *got)
{
    (void)l;
    if (k >= fail_from)
        return -ENOENT; /* freed while its pieces were sent */
    for (*got = 0; *got < max; (*got)++) {
        size_t i = k + *got;
        char b[4096];
        memset(b, (int)i, sizeof(b));
        p[*got].fd = memfd_create("piece", MFD_CLOEXEC);
        p[*got].len = sizeof(b) * (1 + i % 3);
        assert_int_equal(pwrite(p[*got].fd, b, sizeof(b), 0), sizeof(b));
    }
    return 0;
}

static const shim_handoff_source source = {layout, pieces};

/* What the importer's sink saw: the layout, and each piece's length and
 * the last byte of its first 4 KiB, in order. */
typedef struct seen {
    shim_handoff_layout l;
    size_t n, batches;
    size_t len[PIECES];
    unsigned char byte[PIECES];
} seen;

static int begin(void *ctx, const shim_handoff_layout *l)
{
    ((seen *)ctx)->l = *l;
    return 0;
}

static int take(void *ctx, size_t k, const shim_vmm_piece *p, size_t n)
{
    seen *s = ctx;
    assert_int_equal(k, s->n); /* batches in order */
    s->batches++;
    for (size_t i = 0; i < n && s->n < PIECES; i++, s->n++) {
        s->len[s->n] = p[i].len;
        assert_int_equal(pread(p[i].fd, &s->byte[s->n], 1, 4095), 1);
    }
    return 0;
}

static void test_round_trip(void **state)
{
    (void)state;
    uint64_t token = 0, again = 1;
    assert_int_equal(shim_handoff_serve(&source, &token), 0);
    assert_int_equal(shim_handoff_serve(&source, &again), 0); /* once is enough */
    assert_int_equal(again, token);
    seen s = {0};
    shim_handoff_sink sink = {begin, take, &s};
    assert_int_equal(shim_handoff_fetch(getpid(), token, 12, NONCE, &sink), 0);
    assert_int_equal(s.l.n, PIECES);
    assert_int_equal(s.l.skip, 12);
    assert_int_equal(s.n, PIECES);
    assert_int_equal(s.batches, 3); /* 32 a message */
    for (size_t i = 0; i < PIECES; i++) {
        assert_int_equal(s.len[i], 4096 * (1 + i % 3));
        assert_int_equal(s.byte[i], i); /* each piece in its place */
    }
    /* The exporter's refusal comes back as it was. */
    seen none = {0};
    sink.ctx = &none;
    assert_int_equal(shim_handoff_fetch(getpid(), token, 12, NONCE + 1, &sink), -ESTALE);
    assert_int_equal(none.n, 0);
    /* The exporter's error in the middle comes back as it was, after the
     * batches before it. */
    seen half = {0};
    sink.ctx = &half;
    fail_from = 32;
    assert_int_equal(shim_handoff_fetch(getpid(), token, 12, NONCE, &sink), -ENOENT);
    fail_from = SIZE_MAX;
    assert_int_equal(half.n, 32);
    /* Nobody listens in pid 1's name, nor in this process's with another
     * token. */
    assert_int_equal(shim_handoff_fetch(1, token, 0, NONCE, &sink), -ECONNREFUSED);
    assert_int_equal(shim_handoff_fetch(getpid(), token ^ 1, 12, NONCE, &sink),
                     -ECONNREFUSED);
}

/* The wire format as handoff.c writes it, for the impostor below. */
typedef struct { char magic[8]; uint32_t slot, zero; uint64_t nonce; } wire_request;
typedef struct { int32_t err; uint32_t n; uint64_t skip, span; } wire_answer;

/* A process binds the name of process 1 and answers one request with one
 * piece, well formed. The importer, asked to fetch from process 1, sees
 * another pid at the other end and takes nothing from it. */
static void test_impostor_refused(void **s)
{
    (void)s;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t c = fork();
    if (c == 0) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        int len = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1,
                           "cupool-ipc-1-%016llx", (unsigned long long)TOKEN);
        int l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        if (bind(l, (struct sockaddr *)&a, offsetof(struct sockaddr_un, sun_path) + 1 +
                                               (socklen_t)len) || listen(l, 1))
            _exit(2);
        write(ready[1], "r", 1);
        int k = accept(l, NULL, NULL);
        wire_request rq;
        wire_answer an = {0, 1, 0, 4096};
        uint64_t piece_len = 4096;
        int fd = memfd_create("forged", 0);
        union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
        memset(&u, 0, sizeof(u));
        struct iovec iov = {&piece_len, sizeof(piece_len)};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                           .msg_controllen = sizeof(u.buf)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
        if (k >= 0 && recv(k, &rq, sizeof(rq), 0) == sizeof(rq)) {
            send(k, &an, sizeof(an), MSG_NOSIGNAL);
            sendmsg(k, &m, MSG_NOSIGNAL);
        }
        sleep(1);
        _exit(0);
    }
    char r;
    assert_int_equal(read(ready[0], &r, 1), 1);
    seen got = {0};
    shim_handoff_sink sink = {begin, take, &got};
    assert_int_equal(shim_handoff_fetch(1, TOKEN, 0, NONCE, &sink), -EPERM);
    assert_int_equal(got.n, 0);
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    close(ready[0]);
    close(ready[1]);
}

/* Another user (root's tests only) asks this process for an export with
 * the right nonce. Through shim_handoff_fetch its importer refuses a
 * listener of another user; speaking the wire format itself, it gets no
 * answer: layout() is never called. */
static void test_other_user_unanswered(void **s)
{
    (void)s;
    if (geteuid() != 0)
        skip_because(SKIP_NOT_ROOT);
    uint64_t token;
    assert_int_equal(shim_handoff_serve(&source, &token), 0);
    int before = atomic_load(&answered);
    pid_t parent = getpid(), c = fork();
    if (c == 0) {
        if (setgid(65534) || setuid(65534))
            _exit(2);
        seen got = {0};
        shim_handoff_sink sink = {begin, take, &got};
        if (shim_handoff_fetch(parent, token, 0, NONCE, &sink) != -EPERM)
            _exit(3);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        int len = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "cupool-ipc-%d-%016llx",
                           (int)parent, (unsigned long long)token);
        int k = socket(AF_UNIX, SOCK_SEQPACKET, 0);
        if (connect(k, (struct sockaddr *)&a,
                    offsetof(struct sockaddr_un, sun_path) + 1 + (socklen_t)len))
            _exit(4);
        wire_request rq = {"cupoolR\001", 0, 0, NONCE};
        wire_answer an;
        /* The exporter may close before the request is even sent. */
        send(k, &rq, sizeof(rq), MSG_NOSIGNAL);
        _exit(recv(k, &an, sizeof(an), 0) > 0 ? 6 : 0); /* closed: no answer */
    }
    int st;
    assert_int_equal(waitpid(c, &st, 0), c);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    assert_int_equal(atomic_load(&answered), before);
}

/* A slow importer (20 ms a batch, as mapping takes): without the
 * exporter waiting, batches would pile up in the socket. */
static int count(void *ctx, size_t k, const shim_vmm_piece *p, size_t n)
{
    (void)k, (void)p;
    *(size_t *)ctx += n;
    usleep(20000);
    return 0;
}

static int nothing(void *ctx, const shim_handoff_layout *l)
{
    (void)ctx, (void)l;
    return 0;
}

/* 600 pieces for a user (not root, whose descriptors in flight are not
 * limited) allowed 100 open descriptors: they arrive, as the exporter
 * sends a batch only once the one before was taken (without that, the
 * kernel refuses the sends: ETOOMANYREFS). */
static void test_many_pieces_under_a_limit(void **s)
{
    (void)s;
    if (geteuid() != 0)
        skip_because(SKIP_NOT_ROOT);
    pid_t c = fork();
    if (c == 0) {
        struct rlimit rl = {100, 100}; /* both ends: 2 batches and a few */
        if (setgid(65534) || setuid(65534) || setrlimit(RLIMIT_NOFILE, &rl))
            _exit(2);
        npieces = 600;
        uint64_t token;
        if (shim_handoff_serve(&source, &token))
            _exit(3);
        size_t got = 0;
        shim_handoff_sink sink = {nothing, count, &got};
        int err = shim_handoff_fetch(getpid(), token, 0, NONCE, &sink);
        _exit(err ? 4 : got == 600 ? 0 : 5);
    }
    int st;
    assert_int_equal(waitpid(c, &st, 0), c);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* first: it forks a child that starts a thread, which ThreadSanitizer
         * allows only while this process has no thread of its own yet */
        cmocka_unit_test(test_many_pieces_under_a_limit),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_impostor_refused),
        cmocka_unit_test(test_other_user_unanswered),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
