/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_trace.c - the trace format (round trip, truncation, corruption),
 * the replay (known sequences give known figures under each policy, the
 * reordering of cross-thread stamps) and the SVG timeline (parsed by real
 * XML parsers).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <sys/stat.h>
#include <zlib.h>

#include "plot.h"
#include "replay.h"
#include "trace.h"
#include "trace_gz.h"
#include "scratch.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)

typedef struct ev { uint64_t time; trace_op op; uint64_t addr, size; trace_result r; } ev;

static char path[96];

static int setup(void **s)
{
    (void)s;
    int fd = mkstemp(scratch_path(path, sizeof(path), "cupool-test-traceXXXXXX"));
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    unlink(path);
    return 0;
}

static void write_trace(const ev *e, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    trace_header h;
    trace_header_init(&h, 42, "prog", 1000, TRACE_SRC_TEXT);
    assert_int_equal(trace_write_header(f, &h), 0);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(trace_write_record(f, e[i].time, e[i].op, e[i].r, 0,
                                            e[i].addr, e[i].size), 0);
    assert_int_equal(fclose(f), 0);
}

static int load(trace *t, char *why, size_t len)
{
    return trace_load_any(path, t, why, len);
}

static void truncate_to(long size)
{
    assert_int_equal(truncate(path, size), 0);
}

/* ---- format ------------------------------------------------------------- */

static void test_round_trip(void **s)
{
    (void)s;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    trace_header h;
    trace_header_init(&h, 1234, "python3", 99, TRACE_SRC_SHIM);
    assert_int_equal(trace_write_header(f, &h), 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(trace_write_record(f, (uint64_t)i * 7, (trace_op)(1 + i % 7),
                                            (trace_result)(i % 7), (unsigned)(i % 256),
                                            0x7f0000000000ull + (uint64_t)i * 512,
                                            i == 999 ? TRACE_SIZE_MAX : (uint64_t)i * 1000), 0);
    assert_int_equal(fclose(f), 0);
    trace t;
    char why[256];
    assert_int_equal(load(&t, why, sizeof(why)), 0);
    assert_int_equal(t.n, 1000);
    assert_int_equal(t.partial_bytes, 0);
    assert_int_equal(t.hdr.pid, 1234);
    assert_string_equal(t.hdr.comm, "python3");
    assert_int_equal(t.hdr.start_unix_ns, 99);
    assert_int_equal(t.hdr.source, TRACE_SRC_SHIM);
    for (int i = 0; i < 1000; i++) {
        const trace_record *r = &t.rec[i];
        assert_int_equal(r->time, (uint64_t)i * 7);
        assert_int_equal(trace_op_of(r), 1 + i % 7);
        assert_int_equal(trace_result_of(r), i % 7);
        assert_int_equal(trace_device(r), i % 256);
        assert_int_equal(r->addr, 0x7f0000000000ull + (uint64_t)i * 512);
        assert_int_equal(trace_size(r), i == 999 ? TRACE_SIZE_MAX : (uint64_t)i * 1000);
    }
    trace_free(&t);
}

/* Threads' records interleave in chunks: the reader sorts by time, keeping
 * the file order of equal times (one thread's order). */
static void test_sorted_stably(void **s)
{
    (void)s;
    const ev e[] = {
        {30, TRACE_ALLOC, 3, 512, 0}, {40, TRACE_ALLOC, 4, 512, 0},
        {10, TRACE_ALLOC, 1, 512, 0}, {20, TRACE_ALLOC, 2, 512, 0},
        {20, TRACE_FREE, 2, 0, 0}, {5, TRACE_ALLOC, 0, 512, 0},
    };
    write_trace(e, 6);
    trace t;
    char why[256];
    assert_int_equal(load(&t, why, sizeof(why)), 0);
    static const uint64_t want_addr[] = {0, 1, 2, 2, 3, 4};
    for (int i = 0; i < 6; i++)
        assert_int_equal(t.rec[i].addr, want_addr[i]);
    assert_int_equal(trace_op_of(&t.rec[2]), TRACE_ALLOC);
    assert_int_equal(trace_op_of(&t.rec[3]), TRACE_FREE);
    trace_free(&t);
}

/* A trace cut at any byte: before the header ends it is refused with a
 * reason; after, every whole record reads and the partial one is counted. */
static void test_truncated_anywhere(void **s)
{
    (void)s;
    ev e[3];
    for (int i = 0; i < 3; i++)
        e[i] = (ev){(uint64_t)i, TRACE_ALLOC, 4096u * (unsigned)(i + 1), 512, 0};
    for (long cut = 0; cut <= TRACE_HEADER_SIZE + 3 * TRACE_RECORD_SIZE; cut++) {
        write_trace(e, 3);
        truncate_to(cut);
        trace t;
        char why[256] = "";
        int rc = load(&t, why, sizeof(why));
        if (cut < TRACE_HEADER_SIZE) {
            assert_int_equal(rc, -1);
            assert_non_null(strstr(why, "truncated header"));
            continue;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(t.n, (size_t)(cut - TRACE_HEADER_SIZE) / TRACE_RECORD_SIZE);
        assert_int_equal(t.partial_bytes, (size_t)(cut - TRACE_HEADER_SIZE) % TRACE_RECORD_SIZE);
        for (size_t i = 0; i < t.n; i++)
            assert_int_equal(t.rec[i].addr, 4096u * (i + 1));
        trace_free(&t);
    }
}

/* Patches bytes of the header at off. */
static void patch(long off, const void *bytes, size_t n)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, off, SEEK_SET), 0);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void expect_refused(const char *reason)
{
    trace t;
    char why[256] = "";
    assert_int_equal(load(&t, why, sizeof(why)), -1);
    if (!strstr(why, reason))
        fail_msg("expected '%s' in '%s'", reason, why);
}

static void test_corrupted_header(void **s)
{
    (void)s;
    const ev e[] = {{1, TRACE_ALLOC, 4096, 512, 0}};
    write_trace(e, 1);
    patch(0, "CUPOOLTX", 8);
    expect_refused("not a cupool trace");
    write_trace(e, 1);
    uint32_t v = 2;
    patch(offsetof(trace_header, version), &v, 4);
    expect_refused("version 2");
    write_trace(e, 1);
    uint32_t rs = 32;
    patch(offsetof(trace_header, record_size), &rs, 4);
    expect_refused("corrupted header");
    write_trace(e, 1);
    patch(offsetof(trace_header, source), "\x09", 1);
    expect_refused("corrupted header");
    write_trace(e, 1);
    patch(offsetof(trace_header, comm), "0123456789abcdef", 16); /* unterminated */
    expect_refused("corrupted header");
    /* Every single-byte change of the header loads or is refused with a
     * reason: never a crash (this runs under ASan). */
    for (long off = 0; off < TRACE_HEADER_SIZE; off++) {
        write_trace(e, 1);
        patch(off, "\xff", 1);
        trace t;
        char why[256] = "";
        if (load(&t, why, sizeof(why)) == 0)
            trace_free(&t);
        else
            assert_true(why[0] != '\0');
    }
    /* A record with an unknown operation is skipped and counted. */
    write_trace(e, 1);
    FILE *f = fopen(path, "ab");
    assert_non_null(f);
    trace_record bad = {2, 8192, trace_word(TRACE_ALLOC, 0, 0, 512) | (UINT64_C(15) << 48)};
    assert_int_equal(fwrite(&bad, sizeof(bad), 1, f), 1);
    assert_int_equal(fclose(f), 0);
    trace t;
    char why[256];
    assert_int_equal(load(&t, why, sizeof(why)), 0);
    assert_int_equal(t.n, 1);
    assert_int_equal(t.bad_records, 1);
    trace_free(&t);
    /* A file that does not exist. */
    unlink(path);
    expect_refused("cannot open");
}

/* ---- replay ------------------------------------------------------------- */

static replay_result replay(const char *policy, uint64_t capacity, uint64_t cap,
                            bool samples)
{
    trace t;
    char why[256];
    assert_int_equal(load(&t, why, sizeof(why)), 0);
    /* The figures below are worked out for 2 MiB small segments, and a
     * segment of its own size for each large request (no mid segments). */
    replay_opts o = {.capacity = capacity, .max_reserved = cap,
                     .policy = replay_policy_find(policy),
                     .small_segment = 2 * MIB, .mid_set = true, .samples = samples};
    assert_non_null(o.policy);
    replay_result r;
    assert_int_equal(replay_run(&t, &o, &r), 0);
    trace_free(&t);
    return r;
}

/* One 2 MiB small segment: A 256 KiB, spacer, C 128 KiB, spacer, three
 * 512 KiB fillers; A and C freed. 128 KiB then goes to C under best fit
 * (exact) but to A under first fit (lowest), so 256 KiB finds A under best
 * fit and needs a new segment under first fit. Without splitting, every
 * block is its own segment and each request takes a freed block whole. */
static const ev holes[] = {
    {0, TRACE_ALLOC, 0xA, 256 * KIB, 0}, {1, TRACE_ALLOC, 0x51, 64 * KIB, 0},
    {2, TRACE_ALLOC, 0xC, 128 * KIB, 0}, {3, TRACE_ALLOC, 0x52, 64 * KIB, 0},
    {4, TRACE_ALLOC, 0xF1, 512 * KIB, 0}, {5, TRACE_ALLOC, 0xF2, 512 * KIB, 0},
    {6, TRACE_ALLOC, 0xF3, 512 * KIB, 0},
    {7, TRACE_FREE, 0xA, 0, 0}, {8, TRACE_FREE, 0xC, 0, 0},
    {9, TRACE_ALLOC, 0x1, 128 * KIB, 0}, {10, TRACE_ALLOC, 0x2, 256 * KIB, 0},
};

static void test_replay_known_figures(void **s)
{
    (void)s;
    write_trace(holes, sizeof(holes) / sizeof(holes[0]));
    replay_result best = replay("best", 0, 0, false);
    assert_int_equal(best.peak_reserved, 2 * MIB);
    assert_int_equal(best.peak_allocated, 2 * MIB);
    assert_int_equal(best.seg_reserves, 1);
    assert_int_equal(best.fences, 1);
    assert_int_equal(best.allocs, 9);
    assert_int_equal(best.frees, 2);
    assert_int_equal(best.end_live_blocks, 7);
    assert_int_equal(best.end_allocated, 2 * MIB);
    assert_int_equal(best.ooms + best.unmatched_frees, 0);
    replay_result first = replay("first", 0, 0, false);
    assert_int_equal(first.peak_reserved, 4 * MIB);
    assert_int_equal(first.seg_reserves, 2);
    /* At its peak: 4 MiB reserved, 2 MiB allocated; free blocks of 128,
     * 128 and 1792 KiB: 1 - 1792/2048. */
    assert_true(first.frag_at_peak > 0.1249 && first.frag_at_peak < 0.1251);
    replay_result nosplit = replay("nosplit", 0, 0, false);
    assert_int_equal(nosplit.peak_reserved, 2 * MIB);
    assert_int_equal(nosplit.seg_reserves, 7);
    /* With a 3 MiB device, first fit runs out where best fit does not:
     * 2 MiB were free in total, in holes of 128 KiB. */
    replay_result capped = replay("first", 3 * MIB, 0, false);
    assert_int_equal(capped.ooms, 1);
    assert_int_equal(capped.first_oom.index, 10);
    assert_int_equal(capped.first_oom.size, 256 * KIB);
    assert_int_equal(capped.first_oom.reserved, 2 * MIB);
    assert_int_equal(capped.first_oom.largest_free, 128 * KIB);
    assert_true(capped.first_oom.fragmentation);
    assert_int_equal(replay("best", 3 * MIB, 0, false).ooms, 0);
    /* Under a 1 MiB cap nothing beyond the first segment... which is 2 MiB:
     * the very first allocation fails, for lack of memory. */
    replay_result tiny = replay("best", 0, 1 * MIB, false);
    assert_int_equal(tiny.first_oom.index, 0);
    assert_false(tiny.first_oom.fragmentation);
}

/* With a device that can trim (--trim), the pool gives back the units under
 * a free block inside a segment that still holds a live block: under a
 * 48 MiB cap, 36 MiB fit beside 10 MiB live in a 40 MiB segment. */
static void test_replay_trim(void **s)
{
    (void)s;
    const ev e[] = {
        {0, TRACE_ALLOC, 0xA000, 40 * MIB, 0}, {1, TRACE_FREE, 0xA000, 0, 0},
        {2, TRACE_ALLOC, 0xB000, 10 * MIB, 0}, {3, TRACE_ALLOC, 0xC000, 36 * MIB, 0},
    };
    write_trace(e, sizeof(e) / sizeof(e[0]));
    trace t;
    char why[256];
    assert_int_equal(load(&t, why, sizeof(why)), 0);
    replay_opts o = {.max_reserved = 48 * MIB, .policy = replay_policy_find("best")};
    replay_result whole, trimmed;
    assert_int_equal(replay_run(&t, &o, &whole), 0);
    o.trim_unit = 2 * MIB;
    assert_int_equal(replay_run(&t, &o, &trimmed), 0);
    trace_free(&t);
    assert_int_equal(whole.ooms, 1);
    assert_int_equal(whole.first_oom.size, 36 * MIB);
    assert_int_equal(trimmed.ooms, 0);
    assert_int_equal(trimmed.peak_reserved, 46 * MIB);
    assert_int_equal(trimmed.peak_allocated, 46 * MIB);
}

/* With stitching (--stitch), a request no hole fits maps the holes: the
 * two 8 MiB holes around a live block serve 16 MiB with nothing more
 * reserved. And on the shipped transformer trace, reserved stays within 5%
 * of allocated at the peak (1.42x without). */
static void test_replay_stitch(void **s)
{
    (void)s;
    const ev e[] = {
        {0, TRACE_ALLOC, 0xA000, 8 * MIB, 0}, {1, TRACE_ALLOC, 0xB000, 8 * MIB, 0},
        {2, TRACE_ALLOC, 0xC000, 8 * MIB, 0}, {3, TRACE_FREE, 0xA000, 0, 0},
        {4, TRACE_FREE, 0xC000, 0, 0}, {5, TRACE_ALLOC, 0xD000, 16 * MIB, 0},
    };
    write_trace(e, sizeof(e) / sizeof(e[0]));
    trace t;
    char why[256];
    assert_int_equal(load(&t, why, sizeof(why)), 0);
    /* 8 MiB requests in segments of their own (no mid segments). */
    replay_opts o = {.policy = replay_policy_find("best"), .trim_unit = 2 * MIB,
                     .mid_set = true};
    replay_result plain, stitched;
    assert_int_equal(replay_run(&t, &o, &plain), 0);
    o.stitch = true;
    assert_int_equal(replay_run(&t, &o, &stitched), 0);
    trace_free(&t);
    assert_int_equal(plain.peak_reserved, 40 * MIB);
    assert_int_equal(plain.stitches, 0);
    assert_int_equal(stitched.peak_reserved, 24 * MIB);
    assert_int_equal(stitched.stitches, 1);

    assert_int_equal(trace_load_any("test/data/transformer.trace.gz", &t, why,
                                    sizeof(why)), 0);
    assert_int_equal(replay_run(&t, &o, &stitched), 0);
    /* CUPOOL_STITCH's own unit (POOL_STITCH_UNIT): fewer, larger pieces. */
    replay_result coarse;
    replay_opts oc = {.policy = o.policy, .stitch = true};
    assert_int_equal(replay_run(&t, &oc, &coarse), 0);
    o.stitch = false;
    assert_int_equal(replay_run(&t, &o, &plain), 0);
    trace_free(&t);
    assert_int_equal(stitched.ooms, 0);
    /* Blocks keep unsplit tails as they land: allocated moves a little. */
    assert_true(stitched.peak_allocated <= plain.peak_allocated / 1000 * 1001);
    assert_true(plain.peak_reserved > plain.peak_allocated / 100 * 140);
    assert_true(stitched.peak_reserved <= plain.peak_allocated / 100 * 105);
    assert_int_equal(coarse.ooms, 0);
    assert_true(coarse.peak_reserved <= plain.peak_allocated / 100 * 105);
    /* Mappings: each 8 MiB unit is one, each 2 MiB granule one. */
    assert_true(coarse.stitched_bytes / POOL_STITCH_UNIT * 2 <
                stitched.stitched_bytes / (2 * MIB));
}

/* Mid segments on the DistributedDataParallel trace (test/data/ddp.trace.gz:
 * PyTorch's own allocator, four batch sizes, from its snapshot): cupool's
 * default holds within 1% of what PyTorch held for the same sequence;
 * with a segment of its own size for each request, over 15% more. */
static void test_replay_mid_segments(void **s)
{
    (void)s;
    trace t;
    char why[256];
    assert_int_equal(trace_load_any("test/data/ddp.trace.gz", &t, why, sizeof(why)), 0);
    replay_opts o = {.policy = replay_policy_find("best")};
    replay_result mid, own;
    assert_int_equal(replay_run(&t, &o, &mid), 0);
    o.mid_set = true; /* mid_max 0 */
    assert_int_equal(replay_run(&t, &o, &own), 0);
    trace_free(&t);
    assert_int_equal(mid.ooms, 0);
    assert_true(mid.recorded_peak_reserved > 0);
    assert_true(mid.peak_reserved <= mid.recorded_peak_reserved / 100 * 101);
    assert_true(own.peak_reserved > own.recorded_peak_reserved / 100 * 115);
    assert_int_equal(mid.peak_allocated, own.peak_allocated);
}

/* --fence-lag: asynchronous fences, done that long after they begin. A
 * 4 MiB block freed since the last fence began is not forced for a 4 MiB
 * request that a clean 6 MiB block serves; the 6 MiB request after it then
 * needs a segment. With fences done at once, the 4 MiB block serves the
 * 4 MiB request and nothing grows. */
static void test_replay_fence_lag(void **s)
{
    (void)s;
    const ev e[] = {
        {0, TRACE_ALLOC, 0xA000, 8 * MIB, 0}, {1000, TRACE_ALLOC, 0xB000, 4 * MIB, 0},
        {2000, TRACE_FREE, 0xA000, 0, 0},     {3000, TRACE_ALLOC, 0xC000, 2 * MIB, 0},
        {4000, TRACE_FREE, 0xB000, 0, 0},     {5000, TRACE_ALLOC, 0xD000, 4 * MIB, 0},
        {6000, TRACE_ALLOC, 0xE000, 6 * MIB, 0},
    };
    write_trace(e, sizeof(e) / sizeof(e[0]));
    trace t;
    char why[256];
    assert_int_equal(load(&t, why, sizeof(why)), 0);
    replay_opts o = {.policy = replay_policy_find("best"), .mid_set = true};
    replay_result now, lag;
    assert_int_equal(replay_run(&t, &o, &now), 0);
    /* Even a fence done before the next event is not done within the
     * request that began it: the 4 MiB request takes the 6 MiB block. */
    o.fence_lag = 500;
    assert_int_equal(replay_run(&t, &o, &lag), 0);
    /* Policy none: no fence at all, each freed block reused at once. */
    replay_result none;
    o.policy = replay_policy_find("none");
    assert_int_equal(replay_run(&t, &o, &none), 0);
    trace_free(&t);
    assert_int_equal(none.peak_reserved, 12 * MIB);
    assert_int_equal(none.fences, 0);
    assert_int_equal(now.peak_reserved, 12 * MIB);
    assert_int_equal(now.fences_forced, 0);
    assert_int_equal(lag.peak_reserved, 18 * MIB);
    assert_int_equal(lag.fences_forced, 1); /* the 2 MiB request's: nothing clean */
}

/* Recorded out-of-memory requests, flushes and segments. */
static void test_replay_recorded_events(void **s)
{
    (void)s;
    const ev e[] = {
        {0, TRACE_RESERVE, 0x100000, 2 * MIB, 0},
        {1, TRACE_ALLOC, 0x100000, 4096, 0},
        {2, TRACE_RESERVE, 0x400000, 8 * MIB, 0},
        {3, TRACE_ALLOC, 0x400000, 7 * MIB, 0},
        {4, TRACE_FREE, 0x400000, 0, 0},
        {5, TRACE_FENCE, 0, 0, 0}, {6, TRACE_FENCE, 0, 0, TRACE_R_DEFERRED},
        {7, TRACE_FLUSH, 0, 8 * MIB, 0},
        {8, TRACE_RELEASE, 0x400000, 8 * MIB, 0},
        {9, TRACE_OOM, 0, 6 * MIB, TRACE_R_CAP},
        {10, TRACE_FREE, 0xdead000, 0, 0},
    };
    write_trace(e, sizeof(e) / sizeof(e[0]));
    replay_result r = replay("best", 0, 0, true);
    assert_int_equal(r.recorded_peak_reserved, 10 * MIB);
    assert_int_equal(r.recorded_fences, 1);
    assert_int_equal(r.recorded_flushes, 1);
    assert_int_equal(r.recorded_ooms, 1);
    assert_int_equal(r.recorded_ooms_served, 1); /* no cap in the replay */
    assert_int_equal(r.unmatched_frees, 1);
    assert_int_equal(r.peak_reserved, 10 * MIB);
    /* The flush returned the 8 MiB segment: one sample per record. */
    assert_int_equal(r.nsamples, 11);
    assert_int_equal(r.sample[7].reserved, 2 * MIB);
    assert_int_equal(r.sample[8].recorded_reserved, 2 * MIB);
    replay_result_free(&r);
}

/* Absurd traces neither wrap a sum nor alias an address. A record holds
 * at most 256 TiB, so 20 000 of them add up past 2^64: the simulated device
 * (unbounded by default) holds at most 4 EiB, so allocations past it fail
 * as out of memory; recorded reservations past it are refused. Before,
 * such a replay printed "peak reserved 16776960 TiB". */
static void test_replay_absurd_sizes(void **s)
{
    (void)s;
    enum { N = 20000 };
    static ev e[N];
    for (int op = 0; op < 2; op++) {
        for (uint64_t i = 0; i < N; i++)
            e[i] = (ev){i, op ? TRACE_RESERVE : TRACE_ALLOC, (i + 1) << 12,
                        TRACE_SIZE_MAX, 0};
        write_trace(e, N);
        trace t;
        char why[256];
        assert_int_equal(load(&t, why, sizeof(why)), 0);
        replay_opts o = {.policy = replay_policy_find("best"), .small_segment = 2 * MIB};
        replay_result r;
        int err = replay_run(&t, &o, &r);
        trace_free(&t);
        if (op) {
            assert_int_equal(err, -EOVERFLOW);
            continue;
        }
        assert_int_equal(err, 0);
        assert_true(r.allocs > 1000 && r.allocs < N);
        assert_int_equal(r.allocs + r.ooms, N);
        assert_true(r.peak_reserved <= (uint64_t)1 << 62);
        assert_true(r.peak_allocated <= r.peak_reserved);
        replay_result_free(&r);
    }
}

/* Stamps of two threads a few ns out of order: a free recorded just after
 * the reuse of its block, and a free recorded just before the allocation
 * that made its block. The replay puts both back in order. */
static void test_replay_reorders_cross_thread_stamps(void **s)
{
    (void)s;
    const ev e[] = {
        {100, TRACE_ALLOC, 0x1000, 4096, 0},   /* thread A */
        {200, TRACE_ALLOC, 0x1000, 4096, 0},   /* thread B reuses it... */
        {203, TRACE_FREE, 0x1000, 0, 0},       /* ...after A's free */
        {300, TRACE_FREE, 0x2000, 0, 0},       /* A frees what B... */
        {305, TRACE_ALLOC, 0x2000, 8192, 0},   /* ...had just allocated */
        {90000, TRACE_FREE, 0x1000, 0, 0},
    };
    write_trace(e, sizeof(e) / sizeof(e[0]));
    replay_result r = replay("best", 0, 0, false);
    assert_int_equal(r.reordered, 2);
    assert_int_equal(r.unmatched_frees, 0);
    assert_int_equal(r.allocs, 3);
    assert_int_equal(r.frees, 3);
    assert_int_equal(r.end_live_blocks, 0);
    assert_int_equal(r.end_allocated, 0);
}

/* ---- plot --------------------------------------------------------------- */

static void test_plot_is_valid_svg(void **s)
{
    (void)s;
    write_trace(holes, sizeof(holes) / sizeof(holes[0]));
    trace t;
    char why[256];
    assert_int_equal(load(&t, why, sizeof(why)), 0);
    replay_opts o = {.capacity = 3 * MIB, .policy = replay_policy_find("first"),
                     .samples = true};
    replay_result r;
    assert_int_equal(replay_run(&t, &o, &r), 0);
    char svg[128];
    snprintf(svg, sizeof(svg), "%s.svg", path);
    FILE *f = fopen(svg, "w");
    assert_non_null(f);
    assert_int_equal(plot_svg(f, &t, &o, &r, "a <title> & \"quotes\"", false), 0);
    assert_int_equal(fclose(f), 0);
    replay_result_free(&r);
    trace_free(&t);
    /* Two real XML parsers; Python also checks what is drawn. */
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "xmllint --noout %s", svg);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "python3 -c \"import xml.etree.ElementTree as E,sys; "
             "r=E.parse('%s').getroot(); ns='{http://www.w3.org/2000/svg}'; "
             "assert r.tag==ns+'svg'; p=r.findall(ns+'polyline'); assert len(p)==3, len(p); "
             "assert all(len(x.get('points').split())>=2 for x in p); "
             "t=' '.join(x.text or '' for x in r.iter(ns+'text')); "
             "assert 'OOM in replay' in t and 'fragmentation' in t and '<title>' in t, t\"",
             svg);
    assert_int_equal(system(cmd), 0);
    unlink(svg);
}

/* Writes len bytes of buf to path as gzip, level 6, n times over. */
static void write_gz(const void *buf, size_t len, int n)
{
    gzFile g = gzopen(path, "wb6");
    assert_non_null(g);
    for (int i = 0; i < n; i++)
        assert_int_equal(gzwrite(g, buf, (unsigned)len), (int)len);
    assert_int_equal(gzclose(g), Z_OK);
}

/* The trace tools read gzip'd traces as they are (the shipped ones in
 * test/data too); cut or bad gzip data is refused with a reason, and a
 * gzip bomb is refused once it passes 64 MiB and 200 times its size. */
static void test_gzip_traces(void **s)
{
    (void)s;
    write_trace(holes, sizeof(holes) / sizeof(holes[0]));
    trace plain, gz;
    char why[256];
    assert_int_equal(load(&plain, why, sizeof(why)), 0);
    unsigned char *raw;
    size_t got;
    assert_int_equal(trace_read_all(path, &raw, &got, why, sizeof(why)), 0);
    write_gz(raw, got, 1);
    assert_int_equal(trace_load_any(path, &gz, why, sizeof(why)), 0);
    assert_int_equal(gz.n, plain.n);
    assert_memory_equal(gz.rec, plain.rec, plain.n * sizeof(plain.rec[0]));
    trace_free(&gz);
    trace_free(&plain);
    /* Cut short: refused. */
    write_gz(raw, got, 1);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    truncate_to(st.st_size - 9);
    assert_int_equal(trace_load_any(path, &gz, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "cut short"));
    free(raw);
    /* 512 MiB of zeros in about 500 KB: refused past 64 MiB + 200x. */
    static unsigned char zeros[1 << 20];
    write_gz(zeros, sizeof(zeros), 512);
    assert_int_equal(trace_load_any(path, &gz, why, sizeof(why)), -1);
    assert_non_null(strstr(why, "refused"));
    assert_int_equal(trace_load_any("test/data/train.trace.gz", &gz, why, sizeof(why)), 0);
    assert_int_equal(gz.n, 3818);
    trace_free(&gz);
}

/* ---- fuzzing ------------------------------------------------------------ */

/* A fuzz loop over the reader, the replay and the plot: mutants of a valid
 * trace (bytes changed, runs inserted or cut, the file cut short) must load
 * or be refused, and every one that loads must replay under every policy
 * and plot, with ASan and UBSan watching. FUZZ_ITERS (default 2000) and
 * FUZZ_SEED (1) set the run. */
static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 33;
}

static void test_fuzz_reader(void **s)
{
    (void)s;
    enum { N = 400 };
    static ev e[N];
    for (int i = 0; i < N; i++) {
        trace_op op = (trace_op)(1 + i % 7);
        e[i] = (ev){(uint64_t)i * 100, op, 0x100000 + (uint64_t)(i % 37) * 4096,
                    op == TRACE_FREE ? 0 : (uint64_t)(512 + (i * 7919) % (4 * MIB)), 0};
    }
    write_trace(e, N);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char good[64 + N * 24], b[64 + N * 24 + 256];
    size_t len = fread(good, 1, sizeof(good), f);
    fclose(f);
    assert_int_equal(len, sizeof(good));
    const char *it = getenv("FUZZ_ITERS"), *seed = getenv("FUZZ_SEED");
    long iters = it ? atol(it) : 2000;
    rng_state = seed ? (uint64_t)atoll(seed) : 1;
    long loaded = 0;
    for (long n = 0; n < iters; n++) {
        size_t m = len;
        memcpy(b, good, len);
        for (int k = 1 + (int)(rng() % 6); k > 0 && m; k--) {
            size_t at = rng() % m, w = 1 + rng() % 16;
            switch (rng() % 4) {
            case 0: b[at] = (unsigned char)rng(); break;
            case 1: /* a header byte: the likeliest place for trouble */
                b[rng() % 64] = (unsigned char)rng(); break;
            case 2: if (m + w <= sizeof(b)) { /* insert w random bytes */
                    memmove(b + at + w, b + at, m - at);
                    for (size_t j = 0; j < w; j++)
                        b[at + j] = (unsigned char)rng();
                    m += w;
                }
                break;
            default: m = at; /* cut short */
            }
        }
        f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(b, 1, m, f), m);
        assert_int_equal(fclose(f), 0);
        trace t;
        char why[256];
        if (load(&t, why, sizeof(why)) != 0) {
            assert_true(why[0] != '\0');
            continue;
        }
        loaded++;
        for (int k = 0; replay_policy_at(k); k++) {
            replay_opts o = {.policy = replay_policy_at(k), .small_segment = 2 * MIB,
                             .capacity = (rng() % 2) * 64 * MIB, .samples = k == 0,
                             .trim_unit = k == 1 ? 2 * MIB : 0};
            replay_result r;
            if (replay_run(&t, &o, &r) == 0) {
                if (k == 0) {
                    FILE *out = fopen("/dev/null", "w");
                    assert_non_null(out);
                    plot_svg(out, &t, &o, &r, "fuzz", false);
                    fclose(out);
                }
                replay_result_free(&r);
            }
        }
        trace_free(&t);
    }
    print_message("fuzz: %ld mutants, %ld loaded and replayed under every policy\n",
                  iters, loaded);
    assert_true(loaded > 0);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_round_trip),
        T(test_sorted_stably),
        T(test_truncated_anywhere),
        T(test_corrupted_header),
        T(test_replay_known_figures),
        T(test_replay_recorded_events),
        T(test_replay_mid_segments),
        T(test_replay_fence_lag),
        T(test_replay_absurd_sizes),
        T(test_replay_trim),
        T(test_replay_stitch),
        T(test_replay_reorders_cross_thread_stamps),
        T(test_plot_is_valid_svg),
        T(test_fuzz_reader),
        T(test_gzip_traces),
    };
    return cmocka_run_group_tests_name("trace", tests, NULL, NULL);
}
