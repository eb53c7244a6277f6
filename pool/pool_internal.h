/*
 * pool_internal.h - the pool's data structures, shared by the files of pool/ only.
 *
 * A segment is one range from the backend. Its blocks tile it exactly and
 * form a doubly linked list in address order. Free blocks also sit in an
 * AVL tree per kind (small, large) ordered by (size, address): the best fit
 * for n bytes is the tree's lower bound of (n, 0). Live blocks sit in a hash
 * map keyed by address, so a free finds its block in O(1). Segments sit in
 * an array sorted by base, for pool_owns and bad-free diagnosis.
 */
#ifndef CUPOOL_POOL_INTERNAL_H
#define CUPOOL_POOL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include "pool.h"

enum pool_kind { POOL_SMALL = 0, POOL_LARGE = 1, POOL_KINDS = 2 };

typedef struct pool_segment pool_segment;

typedef struct pool_block {
    uintptr_t addr;
    size_t size;
    size_t requested;          /* 0 while free */
    uint64_t epoch;            /* epoch of the last free; 0 = never used */
    pool_segment *seg;
    struct pool_block *prev;   /* address neighbours inside seg */
    struct pool_block *next;
    struct pool_block *left;   /* free-index links (free blocks only) */
    struct pool_block *right;
    int height;
    bool free;
} pool_block;

struct pool_segment {
    uintptr_t base;
    size_t size;
    enum pool_kind kind;
    pool_block *first;
};

/* tree.c: AVL tree of free blocks keyed by (size, addr). */
void pool_tree_insert(pool_block **root, pool_block *b);
void pool_tree_remove(pool_block **root, pool_block *b);
/* Smallest block with size >= size (lowest address among equals), or NULL. */
pool_block *pool_tree_lower_bound(pool_block *root, size_t size);
pool_block *pool_tree_max(pool_block *root);
/* Checks order, heights and balance; counts nodes into *count. Returns 0
 * or -EFAULT with a message in why. */
int pool_tree_check(const pool_block *root, size_t *count, char *why,
                    size_t len);
/* Returns true if b is reachable in the tree by its key. */
bool pool_tree_contains(const pool_block *root, const pool_block *b);

/* addrmap.c: open-addressing map from live block address to block. */
typedef struct pool_addrmap {
    struct pool_addrmap_slot *slots;
    size_t mask;   /* capacity - 1; capacity is a power of two */
    size_t count;
} pool_addrmap;

int pool_addrmap_init(pool_addrmap *m);
void pool_addrmap_fini(pool_addrmap *m);
/* Makes room for one more entry; the only call that allocates. 0/-ENOMEM. */
int pool_addrmap_reserve(pool_addrmap *m);
/* Inserts key (nonzero, not present). Needs a prior pool_addrmap_reserve. */
void pool_addrmap_put(pool_addrmap *m, uintptr_t key, pool_block *b);
pool_block *pool_addrmap_get(const pool_addrmap *m, uintptr_t key);
/* Removes key and returns its block, or NULL if absent. */
pool_block *pool_addrmap_take(pool_addrmap *m, uintptr_t key);

struct pool {
    pthread_mutex_t lock;
    pool_config cfg;
    pool_backend be;
    pool_stats st;               /* gauges and counters; derived fields are
                                    filled by pool_stats_get */
    uint64_t epoch;              /* current epoch, starts at 1 */
    size_t idle_bytes;           /* bytes of fully free segments */
    pool_block *tree[POOL_KINDS];
    size_t free_count[POOL_KINDS];
    pool_addrmap live;
    pool_segment **segs;         /* sorted by base */
    size_t nsegs, segs_cap;
    pool_block *spare;           /* free list of block nodes (via next) */
    void **slabs;                /* node slabs, freed at destroy */
    size_t nslabs, slabs_cap;
};

/* Index in p->segs of the segment containing addr, or -1. */
long pool_segment_find(const pool *p, uintptr_t addr);

#endif /* CUPOOL_POOL_INTERNAL_H */
