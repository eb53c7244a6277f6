/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bins.c - the free index: size bins, each an AVL tree by (size, address),
 * with a bitmap of the non-empty bins.
 *
 * Bins split the (size, address) order at size boundaries, so exact best
 * fit is: the lower bound inside the request's own bin, else the smallest
 * block of the next non-empty bin. Bins are exact for the first 32 units of
 * POOL_ALIGN, then 32 per power of two (sizes within a bin differ by at
 * most 1/32), so each tree holds a few blocks and a lookup walks a few
 * nodes instead of log2 of every free block in the pool.
 */
#include <errno.h>
#include <stdio.h>

#include "pool_internal.h"

enum { SUB_BITS = 5, SUB = 1 << SUB_BITS };

unsigned pool_bin_of(size_t size)
{
    uint64_t u = size / POOL_ALIGN;
    if (u < SUB)
        return (unsigned)u;
    unsigned e = 63u - (unsigned)__builtin_clzll(u);
    unsigned m = (unsigned)(u >> (e - SUB_BITS)) & (SUB - 1);
    return (e - SUB_BITS + 1) * SUB + m;
}

static void bit_set(pool_bins *b, unsigned i) { b->map[i / 64] |= 1ull << (i % 64); }
static void bit_clear(pool_bins *b, unsigned i) { b->map[i / 64] &= ~(1ull << (i % 64)); }

void pool_bins_insert(pool_bins *b, pool_block *blk)
{
    unsigned i = pool_bin_of(blk->size);
    pool_tree_insert(&b->tree[i], blk);
    bit_set(b, i);
    b->count++;
}

void pool_bins_remove(pool_bins *b, pool_block *blk)
{
    unsigned i = pool_bin_of(blk->size);
    pool_tree_remove(&b->tree[i], blk);
    if (!b->tree[i].root)
        bit_clear(b, i);
    b->count--;
}

pool_block *pool_bins_lower_bound(const pool_bins *b, size_t size)
{
    unsigned i = pool_bin_of(size);
    pool_block *blk = pool_tree_lower_bound(&b->tree[i], size);
    if (blk)
        return blk;
    i = pool_bitmap_next(b->map, i + 1);
    return i < POOL_BINS ? b->tree[i].min : NULL;
}

pool_block *pool_bins_max(const pool_bins *b)
{
    for (unsigned w = POOL_BIN_WORDS; w-- > 0;)
        if (b->map[w])
            return pool_tree_max(&b->tree[w * 64 + 63 - (unsigned)__builtin_clzll(b->map[w])]);
    return NULL;
}

bool pool_bins_contains(const pool_bins *b, const pool_block *blk)
{
    return pool_tree_contains(&b->tree[pool_bin_of(blk->size)], blk);
}

/* Checks every tree, that each block sits in its size's bin, that the
 * bitmap marks exactly the non-empty bins, and counts blocks into *count. */
int pool_bins_check(const pool_bins *b, size_t *count, char *why, size_t len)
{
    *count = 0;
    for (unsigned i = 0; i < POOL_BINS; i++) {
        bool marked = (b->map[i / 64] >> (i % 64)) & 1;
        if (marked != (b->tree[i].root != NULL)) {
            snprintf(why, len, "bin %u: bitmap disagrees with its tree", i);
            return -EFAULT;
        }
        if (!b->tree[i].root)
            continue;
        size_t n;
        int err = pool_tree_check(&b->tree[i], &n, why, len);
        if (err)
            return err;
        const pool_block *lo = b->tree[i].min;
        const pool_block *hi = pool_tree_max(&b->tree[i]);
        if (pool_bin_of(lo->size) != i || pool_bin_of(hi->size) != i) {
            snprintf(why, len, "bin %u holds a block of %zu bytes", i,
                     pool_bin_of(lo->size) != i ? lo->size : hi->size);
            return -EFAULT;
        }
        *count += n;
    }
    if (*count != b->count) {
        snprintf(why, len, "bins count %zu blocks, hold %zu", b->count, *count);
        return -EFAULT;
    }
    return 0;
}
