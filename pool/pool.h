/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.h - cupool's allocator: a fragmentation-aware best-fit caching pool
 * of address ranges.
 *
 * One pool serves one device. It knows nothing of CUDA: it asks a backend
 * for segments (large address ranges), carves them into blocks, and hands
 * out block addresses. It never dereferences an address, so the tests drive
 * it with a backend made of plain arithmetic.
 *
 * Rules (see DESIGN.md, "The pool"):
 *   - sizes round up to POOL_ALIGN; every address returned is POOL_ALIGN
 *     aligned, provided the backend's segments are;
 *   - requests up to small_max come from small_segment-sized segments, the
 *     rest from segments rounded up to large_round, so the two never mix;
 *     a large request up to mid_max gets a mid_segment instead (several
 *     such requests share one, and once free it serves any large request
 *     it fits), or its own size where the mid segment cannot be had;
 *   - best fit by (size, address) among the clean free blocks of the right
 *     kind, in O(log n); ties go to the lowest address;
 *   - a block is split only when the remainder is useful, and a cached block
 *     of max_split bytes or more is never split nor given to a request much
 *     smaller than itself;
 *   - free coalesces with both address neighbours in the segment;
 *   - when nothing fits a large request and the backend can stitch, first
 *     dissolve the stitched segments with nothing allocated, then map the
 *     whole trim units under clean free blocks (fragments first), and
 *     fresh memory for what they lack, into one new segment (below);
 *   - when nothing fits, grow; if the backend fails or the cap would be
 *     exceeded, release every fully free segment (and, if the backend can
 *     trim, the whole trim units under free blocks, largest first, until a
 *     segment's worth is back) and retry once.
 *
 * Stream safety: a freed block is "dirty" until the backend's next fence
 * (or, with asynchronous fences, until the next fence begun after its free
 * is done), and is never handed out before it. Allocation takes the best clean fit.
 * It fences first when nothing clean fits but dirty blocks exist, or when
 * a dirty block would fit clearly better (a smaller size bin) and at least
 * fence_interval allocations have passed since the last fence (for large
 * requests, always: they keep strict best fit). One fence
 * makes every earlier free clean and merges it with its free neighbours;
 * until then dirty blocks merge only with dirty neighbours.
 *
 * Stitching: a stitched segment is a new address range over memory the
 * pool already holds (the parts), so it adds nothing to reserved. While it
 * exists its parts are neither free nor live in their own segments. It is
 * a segment like any other until every block in it is free and clean and a
 * large request finds no fit (or a flush, or the cap, asks for memory):
 * then it is unstitched and its parts are free blocks again.
 *
 * Errors: every function that can fail returns 0 or a negative errno.
 * Thread safety: every function takes the pool's lock; a pool may be shared
 * by any number of threads.
 */
#ifndef CUPOOL_POOL_H
#define CUPOOL_POOL_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#include "budget.h"

#define POOL_ALIGN ((size_t)512)

/* The stitch unit (trim_unit) CUPOOL_STITCH and 'cupool replay --stitch'
 * use without a cap unless told otherwise. A stitch costs the driver one
 * mapping per unit (about 17 us on an H100, whatever its size), so a unit
 * of 8 MiB stitches at a quarter of 2 MiB granules' cost; holes smaller
 * than a unit stay unused (16 MiB units left GPT-2 and DDP holding 1-2%
 * more than PyTorch's expandable segments; 8 MiB ones hold no more, at the
 * same step time). Under a cap, where that costs headroom, the granule
 * (2 MiB) is the unit (docs/BENCHMARKS.md, "Stitching"). */
#define POOL_STITCH_UNIT ((size_t)8 << 20)

/* Backend: how the pool reaches the device. Called with the pool's lock held;
 * a backend must not call back into the same pool. */
/* A range of addresses. */
typedef struct pool_span {
    uintptr_t addr;
    size_t size;
} pool_span;

/* The bytes of n spans. */
static inline size_t pool_spans_size(const pool_span *s, size_t n)
{
    size_t size = 0;
    for (size_t i = 0; i < n; i++)
        size += s[i].size;
    return size;
}

/* Index of the range among n sorted, disjoint ones that holds addr, or
 * -1; at(ctx, i) is range i (inlined where at is known). */
static inline long pool_span_find(const void *ctx, size_t n,
                                  pool_span (*at)(const void *ctx, size_t i),
                                  uintptr_t addr)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        pool_span r = at(ctx, mid);
        if (addr < r.addr)
            hi = mid;
        else if (addr - r.addr >= r.size)
            lo = mid + 1;
        else
            return (long)mid;
    }
    return -1;
}

typedef struct pool_backend {
    /* Reserve a segment of exactly size bytes (a multiple of POOL_ALIGN);
     * store its POOL_ALIGN-aligned base in *base. Returns 0, or a negative
     * errno (-ENOMEM when the device is out of memory). */
    int (*reserve)(void *ctx, size_t size, uintptr_t *base);
    /* Give a segment back. Cannot fail from the pool's point of view. */
    void (*release)(void *ctx, uintptr_t base, size_t size);
    /* Make every block freed so far safe to reuse by new work. NULL means
     * blocks are reused at once. Returns 0, -EAGAIN when no fence can be
     * issued now (the allocation is then served from a new segment, which
     * needs none), or another negative errno, with which the allocation
     * that asked for it fails. */
    int (*fence)(void *ctx);
    /* Optional, with fence: asynchronous fences. fence_begin starts one
     * and stores its ticket in *ticket (tickets never decrease, and 0 is
     * never one; an earlier fence's ticket may be answered when it covers
     * everything): every block freed before the call may be reused once
     * fence_poll reports the ticket done. Returns 0, -EAGAIN (none possible
     * now) or another negative errno. fence_poll must not wait on the
     * host: it stores in *done the largest ticket T such that every fence
     * up to T is done, and returns 0 or a negative errno. With force, it
     * first makes the oldest fence not yet done done, by ordering work on
     * the GPU (the pool asks before it grows while fences are in flight);
     * if it cannot now, *done stays as it was. With these, the pool calls
     * fence (which must order everything at once) only when it cannot
     * grow, and before a trim. */
    int (*fence_begin)(void *ctx, uint64_t *ticket);
    int (*fence_poll)(void *ctx, bool force, uint64_t *done);
    /* Optional: told of every allocation and of every free of an address
     * inside the pool, with the lock held, so calls come in the order the
     * lock served them (a block's free always before its reuse). ev is
     * POOL_EV_ALLOC (err 0, the block's address, the bytes asked for) or
     * POOL_EV_FREE (err 0, -EINVAL or -EALREADY; the address; the bytes
     * asked for when the block was allocated, or 0) or POOL_EV_CAP (err
     * -EDQUOT, address 0: the budget refused a segment of size bytes). */
    void (*observe)(void *ctx, int ev, int err, uintptr_t addr, size_t size);
    /* Optional: gives back the memory behind [addr, addr + size), a range
     * of trim_unit multiples inside a segment and inside one free block,
     * with no fence pending (the backend must still make sure no earlier
     * GPU work touches it). The pool then holds the segment's parts on
     * either side as segments of their own. Returns 0, or a negative errno
     * with nothing given back (-EAGAIN: not now). */
    int (*trim)(void *ctx, uintptr_t addr, size_t size);
    size_t trim_unit; /* a power of two; trims and stitches take the
                         unit-aligned units (by address) under free
                         blocks, so a segment whose base is not a
                         multiple of it loses what its edges hold */
    /* Optional, with unstitch: stitching (trim need not be given; its unit
     * must). Maps the memory behind the n ranges
     * of parts (trim_unit multiples inside segments, which the pool keeps
     * out of use under their own addresses until unstitch) one after
     * another into a new address range of their total size, and stores its
     * base (a trim_unit multiple) in *base. Returns 0, or a negative errno
     * with nothing mapped. */
    int (*stitch)(void *ctx, const pool_span *parts, size_t n, uintptr_t *base);
    /* Unmaps a range stitch made, once every block in it is free and clean
     * (so new work is ordered after the old: the old may still run, which
     * the backend must let finish before the addresses go). The parts'
     * memory stays the pool's, under their own addresses again. */
    void (*unstitch)(void *ctx, uintptr_t base, size_t size);
    /* Optional, with stitch: maps the n parts (as stitch takes them) one
     * after another from base + size, the end of the range stitch made at
     * base (size bytes mapped so far), which then unstitches whole. Returns
     * 0, or a negative errno with nothing mapped (-ENOSPC: no room there;
     * the pool stitches anew). */
    int (*extend)(void *ctx, uintptr_t base, size_t size,
                  const pool_span *parts, size_t n);
    void *ctx;
} pool_backend;

enum { POOL_EV_ALLOC = 1, POOL_EV_FREE = 2, POOL_EV_CAP = 3 };

/* How a request picks its block. Only POOL_FIT_BEST is meant for service;
 * the others exist so that `cupool replay` can show what best fit buys on a
 * recorded workload. */
typedef enum pool_fit {
    POOL_FIT_BEST,    /* smallest clean block that fits, split: O(log n) */
    POOL_FIT_FIRST,   /* lowest-addressed clean block that fits, split:
                         O(free blocks), for replay only */
    POOL_FIT_NOSPLIT  /* blocks are never split: each new segment is the
                         request's size, and a request takes the smallest
                         cached block that fits, whole */
} pool_fit;

/* Policy. pool_config_default() (pool.c) fills in the defaults, the one
 * place they are written (the shim's option table and the README show
 * them, and the tests hold both to it). */
typedef struct pool_config {
    size_t small_max;         /* largest "small" request */
    size_t small_segment;     /* segment size for small requests */
    size_t large_round;       /* large segments round up to this */
    size_t mid_max;           /* large requests up to this get a segment
                                 of mid_segment bytes: 0 = none */
    size_t mid_segment;       /* (unless max_split would keep it whole) */
    size_t large_split_min;   /* split a large block only if the remainder
                                 is larger than this */
    size_t max_split;         /* blocks this large are never split: 0 = none */
    size_t oversize_slack;    /* a request >= max_split may take an unsplit
                                 block at most this much larger */
    size_t max_reserved;      /* cap on this pool's reserved bytes (the
                                 limit of a budget of its own): 0 = none */
    pool_budget *budget;      /* a budget shared with other pools (and
                                 whatever else its owner charges to it),
                                 whose limit is the cap instead; NULL =
                                 the pool's own. max_reserved must then
                                 be 0. The owner keeps it alive while
                                 any pool using it is */
    size_t release_threshold; /* idle bytes (fully free segments) kept
                                 cached: SIZE_MAX = keep everything */
    size_t fence_interval;    /* small requests: at most one fence per
                                 this many allocations to reach a better-
                                 fitting dirty block (large requests: 1,
                                 always); 1 = always */
    size_t fence_slack;       /* asynchronous fences: a request may take
                                 a clean block up to this many percent
                                 larger than itself rather than force a
                                 fence for a better fit */
    pool_fit fit;
} pool_config;

/* Gauges: current value and peak. Counters: monotonic. One list, expanded
 * wherever a field is named (struct, printers, tests). */
#define POOL_GAUGES(X)                                                       \
    X(requested, "bytes the callers asked for, live")                        \
    X(allocated, "bytes of live blocks (rounded)")                           \
    X(reserved, "bytes of segments held from the backend")                   \
    X(cached, "bytes reserved but not allocated")

#define POOL_COUNTERS(X)                                                     \
    X(allocs, "successful allocations")                                      \
    X(frees, "successful frees")                                             \
    X(hits, "allocations served without a new segment")                      \
    X(seg_reserves, "segments reserved from the backend")                    \
    X(seg_releases, "segments released to the backend")                      \
    X(reserved_bytes_total, "bytes ever reserved from the backend")          \
    X(released_bytes_total, "bytes ever released to the backend")            \
    X(fences, "fences issued")                                               \
    X(fence_failures, "fences that failed")                                  \
    X(fence_deferrals, "fences not possible now; fresh memory used")         \
    X(fence_forced, "asynchronous fences forced done before growing, and "   \
      "full fences because growth failed")                                   \
    X(retries, "allocations retried after releasing free segments")          \
    X(flushes, "pool_flush calls")                                           \
    X(trims, "free ranges inside segments given back to the backend")        \
    X(stitches, "segments stitched from free memory (and fresh memory for "  \
      "the rest), and idle ones grown in place")                             \
    X(stitched_bytes_total, "bytes of those segments that were free memory "  \
      "already held, not fresh")                                             \
    X(failures, "allocations that failed for lack of memory")                \
    X(bad_frees, "frees rejected (interior, double)")

typedef struct pool_stats {
#define POOL_X_GAUGE(name, doc) uint64_t name, name##_peak;
#define POOL_X_COUNTER(name, doc) uint64_t name;
    POOL_GAUGES(POOL_X_GAUGE)
    POOL_COUNTERS(POOL_X_COUNTER)
#undef POOL_X_GAUGE
#undef POOL_X_COUNTER
    /* Computed when the snapshot is taken. */
    uint64_t largest_free;  /* largest free block, any kind */
    uint64_t free_blocks;   /* number of free blocks */
    uint64_t segments;      /* number of segments held */
    uint64_t idle_bytes;    /* bytes in fully free segments */
    uint64_t epoch;         /* current fence epoch */
} pool_stats;

typedef struct pool pool;

/* Fills *cfg with the defaults (`cupool-options list` shows them). */
void pool_config_default(pool_config *cfg);

/* Checks a configuration: sizes POOL_ALIGN multiples, small_max <=
 * small_segment, nonzero segment sizes, fence_slack at most 100000 (%).
 * Returns 0 or -EINVAL. */
int pool_config_validate(const pool_config *cfg);

/* Creates a pool. cfg NULL means the defaults; the backend is copied and
 * needs reserve and release. Returns 0 and stores the pool in *out, or
 * -EINVAL (bad config/backend) or -ENOBUFS (host memory). */
int pool_create(const pool_config *cfg, const pool_backend *backend,
                pool **out);

/* Releases every segment to the backend, then frees the pool. Live blocks
 * are forgotten. NULL is a no-op. */
void pool_destroy(pool *p);

/* Forgets every segment and block without releasing any (the device was
 * reset), leaving an empty pool that stays valid: other threads may still
 * hold it. Gauges drop to zero; counters go on. */
void pool_forget(pool *p);

/* Holds the pool's lock, so that no call on the pool (nor any backend call
 * one makes) runs until pool_let_go. Waits at most timeout_ms for calls in
 * flight; returns false, holding nothing, if they outlast it. For a caller
 * that must wait out the calls in flight: the trace's final drain. */
bool pool_hold(pool *p, unsigned timeout_ms);
void pool_let_go(pool *p);

/* Allocates size bytes and stores the block's address in *addr.
 * A zero-byte request succeeds, stores 0 and allocates nothing (as
 * cudaMalloc does). Returns 0, or:
 *   -EOVERFLOW  size is too large to round up;
 *   -EDQUOT     serving it would pass the budget's limit, even after
 *               releasing every fully free segment;
 *   -ENOMEM     the backend had no memory, even after that release;
 *   -ENOBUFS    host memory for the pool's own records ran out (the
 *               device was not asked: not an out-of-device-memory);
 *   other       the backend's fence error.
 * On error *addr is left untouched and the pool is unchanged (bar released
 * free segments). */
int pool_alloc(pool *p, size_t size, uintptr_t *addr);

/* Frees the block at addr. Returns 0, or, changing nothing:
 *   -ENOENT   addr is not inside any segment of this pool (a foreign
 *             pointer; the caller may pass it on);
 *   -EINVAL   addr is inside a live block but not its start;
 *   -EALREADY addr is inside a free block (double free). */
int pool_free(pool *p, uintptr_t addr);

/* Returns 1 if addr lies inside one of the pool's segments, else 0. */
int pool_owns(pool *p, uintptr_t addr);

/* If addr is the start of a live block, stores its rounded size in *size
 * and returns 0; else returns pool_free's error for the same address. */
int pool_block_size(pool *p, uintptr_t addr, size_t *size);

/* If addr is inside a live block, stores the block's segment base and size
 * and returns 0; else -ENOENT/-EALREADY as pool_free would. */
int pool_segment_of(pool *p, uintptr_t addr, uintptr_t *base, size_t *size);

/* If addr is inside a live block, stores the block's start and rounded
 * size, and which of the pool's allocations it is (a number no later
 * allocation of the same place has), and returns 0; else -ENOENT or
 * -EALREADY as pool_segment_of. */
int pool_block_of(pool *p, uintptr_t addr, pool_span *block, uint64_t *born);

/* Unstitches every stitched segment with nothing allocated (fencing first
 * if any block is dirty), releases every fully free segment to the backend,
 * and, if the backend can trim, the whole trim units under every other free
 * block. Returns the number of bytes released (never negative). */
size_t pool_flush(pool *p);

/* Changes the cap on reserved bytes (0 = none): the limit of the pool's
 * budget, its own or, if shared, every pool's that uses it. Takes effect at
 * the next growth; nothing already reserved is released. */
void pool_set_max_reserved(pool *p, size_t max_reserved);

/* Copies the pool's statistics into *out. segments counts stitched ones. */
void pool_stats_get(pool *p, pool_stats *out);

/* Verifies every invariant: blocks tile each segment exactly, no two free
 * neighbours, the free index holds exactly the free blocks in order, the
 * address map holds exactly the live blocks, and the counters add up.
 * Returns 0, or -EFAULT with a description of the first violation written
 * to why (at most len bytes, NUL-terminated; why may be NULL). */
int pool_check(pool *p, char *why, size_t len);

/* Short name for a pool error ("cap exceeded", "double free", ...). */
const char *pool_strerror(int err);

#endif /* CUPOOL_POOL_H */
