/* SPDX-License-Identifier: Apache-2.0 */
/*
 * block.c - block nodes and the bookkeeping every block change goes
 * through: the spare-node slabs, the free indexes (clean bins, dirty
 * generations) a free block sits in, and splitting and merging free blocks.
 *
 * Nodes come from slabs the pool frees only at destroy, so a path that
 * reserved its nodes first (pool_nodes_reserve) cannot fail half-way.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "pool_internal.h"

enum { SLAB_BLOCKS = 256 };

/* ---- block nodes ------------------------------------------------------ */

/* Makes sure at least n spare nodes exist. 0 or -ENOBUFS (host memory). */
int pool_nodes_reserve(pool *p, int n)
{
    int have = 0;
    for (pool_block *b = p->spare; b && have < n; b = b->next)
        have++;
    if (have >= n)
        return 0;
    if (!pool_grow((void **)&p->slabs, &p->slabs_cap, p->nslabs, sizeof(*p->slabs)))
        return -ENOBUFS;
    pool_block *slab = calloc(SLAB_BLOCKS, sizeof(*slab));
    if (!slab)
        return -ENOBUFS;
    p->slabs[p->nslabs++] = slab;
    for (int i = 0; i < SLAB_BLOCKS; i++) {
        slab[i].next = p->spare;
        p->spare = &slab[i];
    }
    return 0;
}

pool_block *pool_node_take(pool *p)
{
    pool_block *b = p->spare;
    p->spare = b->next;
    memset(b, 0, sizeof(*b));
    return b;
}

void pool_node_give(pool *p, pool_block *b)
{
    b->next = p->spare;
    p->spare = b;
}

/* ---- gauges ------------------------------------------------------------ */

/* Bytes the backend took back: out of reserved, and back to the budget. */
void pool_reserved_drop(pool *p, size_t bytes)
{
    pool_budget_give(p->budget, bytes);
    p->st.reserved -= bytes;
    pool_cached_update(p);
}

/* ---- free index ------------------------------------------------------- */

/* Dirty blocks of kind, every epoch. */
size_t pool_dirty_count(const pool *p, enum pool_kind kind)
{
    size_t n = 0;
    for (unsigned g = 0; g < p->ngens; g++)
        n += p->gens[g][kind].count;
    return n;
}

bool pool_any_dirty(const pool *p)
{
    return pool_dirty_count(p, POOL_SMALL) + pool_dirty_count(p, POOL_LARGE) != 0;
}

/* Puts free block b into the index its dirty flag names. */
void pool_index_add(pool *p, pool_block *b)
{
    b->free = true;
    if (b->dirty) {
        pool_dirty_insert(pool_gen_of(p, b->epoch, pool_block_kind(b)), b);
    } else {
        pool_bins_insert(&p->clean[pool_block_kind(b)], b);
        if (b->size > b->seg->max_clean)
            b->seg->max_clean = b->size;
    }
}

void pool_index_del(pool *p, pool_block *b)
{
    if (b->dirty)
        pool_dirty_remove(pool_gen_of(p, b->epoch, pool_block_kind(b)), b);
    else
        pool_bins_remove(&p->clean[pool_block_kind(b)], b);
    b->free = false;
}

/* ---- split and merge ---------------------------------------------------- */

/* Carves size bytes off the front of free block b (already out of the
 * index) and puts the remainder back. Needs one spare node. */
void pool_block_split(pool *p, pool_block *b, size_t size)
{
    pool_block *r = pool_node_take(p);
    *r = (pool_block){.addr = b->addr + size, .size = b->size - size,
                      .epoch = b->epoch, .dirty = b->dirty, .seg = b->seg,
                      .prev = b, .next = b->next};
    if (b->next)
        b->next->prev = r;
    b->next = r;
    b->size = size;
    pool_index_add(p, r);
}

/* Merges free block b into its free left neighbour a; returns a. */
static pool_block *block_merge(pool *p, pool_block *a, pool_block *b)
{
    a->size += b->size;
    a->next = b->next;
    if (b->next)
        b->next->prev = a;
    if (b->epoch > a->epoch)
        a->epoch = b->epoch;
    pool_node_give(p, b);
    return a;
}

/* True if free blocks a and b may merge: both clean, or both dirty from
 * one epoch (a block freed later must not hold back an earlier one). */
static bool mergeable(const pool_block *a, const pool_block *b)
{
    return a->dirty == b->dirty && (!a->dirty || a->epoch == b->epoch);
}

/* Merges block b (free, in no index) with each free neighbour of its own
 * state; returns the merged block, in no index. */
pool_block *pool_block_coalesce(pool *p, pool_block *b)
{
    if (b->prev && b->prev->free && mergeable(b->prev, b)) {
        pool_index_del(p, b->prev);
        b = block_merge(p, b->prev, b);
    }
    if (b->next && b->next->free && mergeable(b->next, b)) {
        pool_index_del(p, b->next);
        b = block_merge(p, b, b->next);
    }
    return b;
}
