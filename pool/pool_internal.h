/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool_internal.h - the pool's data structures and the functions its files
 * share, for the files of pool/ only.
 *
 * A segment is one range from the backend. Its blocks tile it exactly and
 * form a doubly linked list in address order. Free blocks also sit in a
 * free index ordered by (size, address): size bins, each an AVL tree. There
 * are two indexes per kind (small, large): clean blocks, safe to hand out,
 * and dirty ones, freed since the last fence (unordered lists per bin, one
 * set per epoch not yet clean: they are never handed out, so they need no
 * order). A dirty block merges only with dirty neighbours of its epoch; a
 * fence done turns the dirty blocks of its epoch and older clean and merges
 * them with their clean neighbours. The best fit for n bytes is the clean index's
 * lower bound of (n, 0). Live blocks sit in a hash
 * map keyed by address, so a free finds its block in O(1). Segments sit in
 * an array sorted by base, for pool_owns and bad-free diagnosis.
 */
#ifndef CUPOOL_POOL_INTERNAL_H
#define CUPOOL_POOL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "addrmap.h"
#include "pool.h"

enum pool_kind { POOL_SMALL = 0, POOL_LARGE = 1, POOL_KINDS = 2 };

enum { POOL_FENCES_MAX = 3 };   /* asynchronous fences in flight, at most */

typedef struct pool_segment pool_segment;

typedef struct pool_block {
    /* What a free-index walk reads comes first, in one cache line. */
    size_t size;
    uintptr_t addr;
    struct pool_block *left;   /* free-index links (free blocks only) */
    struct pool_block *right;
    struct pool_block *parent;
    int height;
    bool free;
    bool dirty;                /* freed in an epoch not yet clean: in the
                                  dirty index, not to be handed out */
    size_t requested;          /* 0 while free */
    uint64_t epoch;            /* epoch of the last free; 0 = never used */
    pool_segment *seg;
    pool_segment *lent;        /* the stitched segment whose part this is
                                  (neither free nor live), or NULL */
    struct pool_block *prev;   /* address neighbours inside seg */
    struct pool_block *next;
    uint64_t born;             /* the pool's allocation count when handed
                                  out: which allocation a live block is */
} pool_block;

struct pool_segment {
    uintptr_t base;
    size_t size;
    enum pool_kind kind;
    size_t live;        /* live blocks; 0 = idle, releasable */
    pool_block *first;
    size_t max_clean;   /* no clean free block here is larger (an upper
                           bound: raised as blocks join the clean index,
                           made exact by first fit's walks) */
    pool_block **parts; /* stitched: the blocks of other segments it maps,
                           in its address order; NULL for a plain segment */
    size_t nparts;
    uint64_t seq;       /* stitched: order of creation. A stitch maps parts
                           of older segments only (an extension too), so
                           no two stitched segments map each other */
};

/* tree.c: AVL tree of free blocks keyed by (size, addr). */
typedef struct pool_tree {
    pool_block *root;
    pool_block *min;   /* leftmost block, or NULL */
} pool_tree;

void pool_tree_insert(pool_tree *t, pool_block *b);
void pool_tree_remove(pool_tree *t, pool_block *b);
/* Smallest block with size >= size (lowest address among equals), or NULL. */
pool_block *pool_tree_lower_bound(const pool_tree *t, size_t size);
pool_block *pool_tree_max(const pool_tree *t);
bool pool_tree_contains(const pool_tree *t, const pool_block *b);
/* Checks order, heights, balance, parent links and the cached minimum;
 * counts nodes into *count. Returns 0 or -EFAULT with a message in why. */
int pool_tree_check(const pool_tree *t, size_t *count, char *why, size_t len);

/* bins.c: the free index, size bins of AVL trees. Bins 0..31 are exact
 * (units of POOL_ALIGN), then 32 per power of two up to 2^64 bytes. */
enum { POOL_BINS = 1664, POOL_BIN_WORDS = POOL_BINS / 64 };

typedef struct pool_bins {
    pool_tree tree[POOL_BINS];
    uint64_t map[POOL_BIN_WORDS];   /* bit i set <=> tree[i] is not empty */
    size_t count;
} pool_bins;

unsigned pool_bin_of(size_t size);

/* First set bit at or after i in a POOL_BINS-bit map, or POOL_BINS. */
static inline unsigned pool_bitmap_next(const uint64_t *map, unsigned i)
{
    if (i >= POOL_BINS)
        return POOL_BINS;
    unsigned w = i / 64;
    uint64_t bits = map[w] & (~0ull << (i % 64));
    while (!bits) {
        if (++w == POOL_BIN_WORDS)
            return POOL_BINS;
        bits = map[w];
    }
    return w * 64 + (unsigned)__builtin_ctzll(bits);
}
void pool_bins_insert(pool_bins *b, pool_block *blk);
void pool_bins_remove(pool_bins *b, pool_block *blk);
/* Smallest block with size >= size (lowest address among equals), or NULL. */
pool_block *pool_bins_lower_bound(const pool_bins *b, size_t size);
pool_block *pool_bins_max(const pool_bins *b);
bool pool_bins_contains(const pool_bins *b, const pool_block *blk);
int pool_bins_check(const pool_bins *b, size_t *count, char *why, size_t len);

/* dirty.c: blocks freed since the last fence, unordered per bin. */
typedef struct pool_dirty {
    pool_block *head[POOL_BINS];
    uint64_t map[POOL_BIN_WORDS];   /* bit i set <=> head[i] != NULL */
    size_t count;
} pool_dirty;

void pool_dirty_insert(pool_dirty *d, pool_block *b);
void pool_dirty_remove(pool_dirty *d, pool_block *b);
/* Some dirty block, or NULL. */
pool_block *pool_dirty_any(const pool_dirty *d);
/* True if a dirty block of at least size bytes sits in a bin below limit
 * (for the request's own bin only its first block is looked at). */
bool pool_dirty_fits_below(const pool_dirty *d, size_t size, unsigned limit);
/* True if a dirty block spans at least size bytes with the free blocks
 * beside it (clean, or dirty of any epoch): as it will once every fence is
 * done and the blocks have merged. Walks every dirty block. */
bool pool_dirty_merged_fits(const pool_dirty *d, size_t size);
size_t pool_dirty_max(const pool_dirty *d);
bool pool_dirty_contains(const pool_dirty *d, const pool_block *b);
int pool_dirty_check(const pool_dirty *d, size_t *count, char *why, size_t len);

struct pool {
    pthread_mutex_t lock;
    pool_config cfg;
    pool_backend be;
    pool_stats st;               /* gauges and counters; derived fields are
                                    filled by pool_stats_get */
    pool_budget *budget;         /* cfg.budget, or own_budget */
    pool_budget own_budget;      /* limit: cfg.max_reserved */
    uint64_t epoch;              /* current epoch, starts at 1: a free
                                    stamps it on its block; each fence (or
                                    fence begun) moves on to the next */
    uint64_t clean_upto;         /* every block freed in an epoch up to this
                                    one is clean */
    size_t allocs_since_fence;
    size_t idle_bytes;           /* bytes of segments with no live block */
    pool_bins clean[POOL_KINDS];  /* free blocks safe to hand out now */
    /* Dirty blocks, one generation per epoch not yet clean: epoch e's in
     * gens[e % ngens]. Synchronous fences need one generation; asynchronous
     * ones POOL_FENCES_MAX + 1 (the epochs in flight and the open one). */
    pool_dirty (*gens)[POOL_KINDS];
    unsigned ngens;
    /* Asynchronous fences in flight, oldest first: each makes the blocks of
     * its epoch and older clean once the backend reports its ticket done. */
    struct { uint64_t epoch, ticket; } inflight[POOL_FENCES_MAX];
    unsigned ninflight;
    pool_addrmap live;
    pool_segment **segs;         /* sorted by base */
    size_t nsegs, segs_cap;
    uint64_t forgotten_segs;     /* dropped by pool_forget, never released */
    long trim_segs;              /* segments trims added (a cut in the
                                    middle) less those they removed (a
                                    whole segment cut away) */
    size_t stitched_segs;        /* stitched segments held */
    uint64_t stitch_seq;         /* the last stitched segment's seq */
    pool_block *spare;           /* free list of block nodes (via next) */
    void **slabs;                /* node slabs, freed at destroy */
    size_t nslabs, slabs_cap;
};

/* ---- small helpers every file of pool/ uses ---------------------------- */

/* Rounds up to a multiple of to (a power of two or not); 0 on overflow. */
static inline size_t pool_round_up(size_t n, size_t to)
{
    size_t r = n % to;
    if (!r)
        return n;
    return n > SIZE_MAX - (to - r) ? 0 : n + (to - r);
}

/* Adds d to gauge *v, raising its peak *peak. */
static inline void pool_gauge_add(uint64_t *v, uint64_t *peak, uint64_t d)
{
    *v += d;
    if (*v > *peak)
        *peak = *v;
}

/* Recomputes cached (reserved less allocated) and its peak. */
static inline void pool_cached_update(pool *p)
{
    p->st.cached = p->st.reserved - p->st.allocated;
    if (p->st.cached > p->st.cached_peak)
        p->st.cached_peak = p->st.cached;
}

/* True if a block or request of size bytes is at least max_split: such a
 * block is never split, and goes only to requests of that size or more. */
static inline bool pool_oversize(const pool *p, size_t size)
{
    return p->cfg.max_split && size >= p->cfg.max_split;
}

static inline enum pool_kind pool_block_kind(const pool_block *b) { return b->seg->kind; }

/* The dirty blocks of kind freed in epoch e. */
static inline pool_dirty *pool_gen_of(pool *p, uint64_t e, enum pool_kind kind)
{
    return &p->gens[e % p->ngens][kind];
}

/* A stitched segment maps parts of other segments (pool_segment's parts). */
static inline bool pool_segment_stitched(const pool_segment *s)
{
    return s->parts != NULL;
}

/* Bytes segment s adds to idle_bytes while it holds no live block: a
 * stitched segment holds no memory of its own. */
static inline size_t pool_segment_idle_size(const pool_segment *s)
{
    return pool_segment_stitched(s) ? 0 : s->size;
}

/* The functions the files share, lowest file first: a file calls only
 * those of the files before it here, never those after (DESIGN.md, "The
 * pool"; scripts/check-shape's POOL_ORDER). */

/* ---- block.c: block nodes, the free indexes, split and merge ------------- */

/* Makes sure at least n spare nodes exist. 0 or -ENOBUFS (host memory). */
int pool_nodes_reserve(pool *p, int n);
/* A zeroed node from the spares (pool_nodes_reserve made sure of one). */
pool_block *pool_node_take(pool *p);
void pool_node_give(pool *p, pool_block *b);
/* Bytes the backend took back: out of reserved, and back to the budget. */
void pool_reserved_drop(pool *p, size_t bytes);
/* Dirty blocks of kind, every epoch. */
size_t pool_dirty_count(const pool *p, enum pool_kind kind);
bool pool_any_dirty(const pool *p);
/* Puts free block b into the index its dirty flag names, and marks it free. */
void pool_index_add(pool *p, pool_block *b);
/* Takes free block b out of its index, and marks it not free. */
void pool_index_del(pool *p, pool_block *b);
/* Carves size bytes off the front of free block b (already out of the
 * index) and puts the remainder back. Needs one spare node. */
void pool_block_split(pool *p, pool_block *b, size_t size);
/* Merges block b (free, in no index) with each free neighbour of its own
 * state; returns the merged block, in no index. */
pool_block *pool_block_coalesce(pool *p, pool_block *b);

/* ---- segment.c: the segment array, reserving and releasing segments ------ */

/* Index in p->segs of the segment containing addr, or -1. */
long pool_segment_find(const pool *p, uintptr_t addr);
/* Makes room in p->segs for one more segment. 0 or -ENOBUFS. */
int pool_segs_room(pool *p);
/* Puts s into p->segs, in base order. 0 or -ENOBUFS. */
int pool_segs_insert(pool *p, pool_segment *s);
/* Reserves a new segment of size bytes and kind, indexes its one free
 * block and stores that block in *out. Needs one spare node. Returns 0,
 * -EDQUOT, -ENOMEM (the device), -ENOBUFS (host memory) or a backend
 * error. */
int pool_segment_grow(pool *p, enum pool_kind kind, size_t size, pool_block **out);
/* Releases segment i, which must hold no live block. */
void pool_segment_release(pool *p, size_t i);

/* ---- fence.c: fences, and the clean block a request gets ----------------- */

/* Issues the backend's fence, which orders everything at once: every dirty
 * block becomes clean. Returns 0, or the fence's error (-EAGAIN: no fence
 * possible now) with nothing changed. */
int pool_fence(pool *p);
/* Finds a clean block for a rounded request, fencing first when that is
 * worth it. *b is NULL when nothing fits even then. 0 or a fence's error. */
int pool_block_find(pool *p, enum pool_kind kind, size_t size, pool_block **b);
/* The clean block a rounded request gets under the pool's fit policy,
 * honouring max_split; NULL if none. */
pool_block *pool_find_fit(pool *p, enum pool_kind kind, size_t size);

/* ---- trim.c: whole trim units under clean free blocks, given back -------- */

/* Whole trim units under one clean free block: a candidate to trim, or a
 * part to stitch. addr is the block's address when collected (blocks move
 * while segments are cut, so a trim finds each again by it). */
typedef struct pool_part { pool_block *b; uintptr_t addr, lo; size_t size; } pool_part;

/* Collects the whole trim units under the clean free blocks into *out
 * (malloc'd, smallest first): to trim, of plain segments; to stitch, of
 * large segments, stitched ones older than seq included. Returns how many,
 * or -1 (host memory). */
long pool_units_collect(pool *p, bool to_stitch, uint64_t seq, pool_part **out);
/* Gives back whole trim units under free blocks, those with the most first,
 * until at least need bytes are back (SIZE_MAX: all of them); fences first
 * if any block is dirty. Returns the bytes given back. */
size_t pool_trim_free(pool *p, size_t need);

/* ---- stitch.c: stitched segments made and undone; idle memory released --- */

/* Unstitches every stitched segment whose blocks are all free and clean.
 * Returns how many. */
size_t pool_unstitch_idle(pool *p);
/* Unstitches every idle stitched segment, then releases segments with no
 * live block until idle bytes are at most keep. Returns the bytes
 * released. */
size_t pool_release_idle(pool *p, size_t keep);
/* Serves a large request of size bytes with a stitched segment. Returns 0
 * with the block in *out, 1 if there is nothing to stitch (plain growth
 * follows), or a negative errno. */
int pool_stitch_grow(pool *p, size_t size, pool_block **out);

#endif /* CUPOOL_POOL_INTERNAL_H */
