/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_recorder.c - the trace recorder's final drain (shim_trace_finish)
 * against a producer caught between reading the recording state and
 * publishing its record: the schedule that lost a record at SIGTERM.
 *
 * The recorder is built with SHIM_TRACE_TESTING, so that every record
 * passes through shim_trace_test_window below before it is published; the
 * test stops the producer there at will. The rest of the shim is replaced
 * by the few functions the recorder calls. Built with ThreadSanitizer.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "process.h"
#include "log.h"
#include "recorder.h"
#include "scratch.h"

/* ---- what the recorder needs from the rest of the shim --------------------- */

void shim_count(enum shim_counter c) { (void)c; }
void shim_count_add(enum shim_counter c, uint64_t n) { (void)c, (void)n; }
void shim_helper_wake(void) {}
void shim_comm(char *buf, size_t len) { snprintf(buf, len, "test"); }

uint64_t shim_mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

uint64_t shim_unix_ns(void) { return shim_mono_ns(); }

int shim_path_expand(const char *pattern, int pid, char *out, size_t len)
{
    (void)pid;
    return snprintf(out, len, "%s", pattern) >= (int)len ? -1 : 0;
}

void shim_log(shim_log_level level, const char *fmt, ...)
{
    (void)level;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- the window ------------------------------------------------------------ */

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool armed, inside, go;

/* Called before every record is published: once armed, the next record
 * waits here until the test says go. */
void shim_trace_test_window(void)
{
    pthread_mutex_lock(&m);
    if (armed) {
        armed = false;
        inside = true;
        pthread_cond_broadcast(&cv);
        while (!go)
            pthread_cond_wait(&cv, &m);
    }
    pthread_mutex_unlock(&m);
}

/* ---- a pool stand-in: the lock its ring's records are written under ------ */

enum { BEFORE = 100 };

typedef struct stand_in {
    pthread_mutex_t lock;
    shim_trace_ring *ring;
} stand_in;

static void hold(void *ctx, shim_trace_ring *r, void (*drain)(shim_trace_ring *))
{
    pthread_mutex_t *lock = ctx;
    pthread_mutex_lock(lock);
    drain(r);
    pthread_mutex_unlock(lock);
}

/* Writes BEFORE records, then one more that stops in the window, each
 * under the pool's lock as the shim's pools do. The last one takes the
 * fast path of shim_trace_put (the clock is read at records 0, 32, 64 and
 * 96), which does not look at the state again after publishing. */
static void *producer(void *arg)
{
    stand_in *sp = arg;
    for (int i = 0; i <= BEFORE; i++) {
        if (i == BEFORE) {
            pthread_mutex_lock(&m);
            armed = true;
            pthread_mutex_unlock(&m);
        }
        pthread_mutex_lock(&sp->lock);
        shim_trace_put(sp->ring, false, TRACE_ALLOC, TRACE_R_OK, 0,
                       0x1000u * (uint64_t)(i + 1), 512);
        pthread_mutex_unlock(&sp->lock);
    }
    return NULL;
}

static void *finisher(void *arg)
{
    (void)arg;
    shim_trace_finish();
    return NULL;
}

/* Records in the trace file. */
static long records(const char *path)
{
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return ((long)st.st_size - (long)sizeof(trace_header)) / (long)sizeof(trace_record);
}

/* Runs the schedule: the producer stops in the window with its record
 * unpublished; the final drain starts; the producer goes on only after
 * the drain has returned, or after a wait: 200 ms with the hold (a drain
 * that does not wait returns in microseconds), 5 s without it (a drain
 * slowed by a loaded machine must still count as returned). Returns the
 * records the file holds once both are done, and whether the drain
 * returned before the producer went on. */
static long schedule(bool with_hold, bool *drained_first)
{
    char path[96];
    close(mkstemp(scratch_path(path, sizeof(path), "cupool-rec-XXXXXX")));
    shim_trace_open(path, 0);
    assert_int_equal(shim_tracing(), 1);
    /* Each run its own pool: the rings of earlier runs are drained too. */
    stand_in *sp = calloc(1, sizeof(*sp));
    assert_non_null(sp);
    pthread_mutex_init(&sp->lock, NULL);
    sp->ring = shim_trace_ring_new(with_hold ? hold : NULL, &sp->lock);
    assert_non_null(sp->ring);
    armed = inside = go = false;
    pthread_t p, f;
    assert_int_equal(pthread_create(&p, NULL, producer, sp), 0);
    pthread_mutex_lock(&m);
    while (!inside)
        pthread_cond_wait(&cv, &m);
    pthread_mutex_unlock(&m);
    assert_int_equal(pthread_create(&f, NULL, finisher, NULL), 0);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += with_hold ? 0 : 5;
    t.tv_nsec += with_hold ? 200 * 1000000L : 0;
    t.tv_sec += t.tv_nsec / 1000000000L;
    t.tv_nsec %= 1000000000L;
    *drained_first = pthread_timedjoin_np(f, NULL, &t) == 0;
    pthread_mutex_lock(&m);
    go = true;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&m);
    assert_int_equal(pthread_join(p, NULL), 0);
    if (!*drained_first)
        assert_int_equal(pthread_join(f, NULL), 0);
    long n = records(path);
    unlink(path);
    return n;
}

/* Without holding the producers off, the drain runs in the window and the
 * record stays in the ring: the loss the hold prevents, shown so that the
 * next test is known to see it. */
static void test_drain_in_the_window_loses_the_record(void **s)
{
    (void)s;
    bool drained_first;
    assert_int_equal(schedule(false, &drained_first), BEFORE);
    assert_true(drained_first);
}

/* shim_trace_finish holds the ring's producers off: it waits for the
 * producer to leave the window, and the file has every record. */
static void test_finish_waits_out_the_window(void **s)
{
    (void)s;
    bool drained_first;
    assert_int_equal(schedule(true, &drained_first), BEFORE + 1);
    assert_false(drained_first);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* This order: the record the first leaves in its ring would reach
         * the second's file at its final drain. */
        cmocka_unit_test(test_finish_waits_out_the_window),
        cmocka_unit_test(test_drain_in_the_window_loses_the_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
