/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dirty.c - blocks freed since the last fence: per-bin unordered lists with
 * a bitmap of the non-empty bins.
 *
 * Dirty blocks are never handed out, so they need no best-fit order: only
 * O(1) insert and unlink (free merges dirty neighbours; the fence moves
 * every block to the clean index), and a cheap answer to "would a dirty
 * block fit better than the clean choice?". The list links reuse the
 * free-index links of pool_block (left = previous, right = next), since a
 * free block sits in exactly one index.
 */
#include <errno.h>
#include <stdio.h>

#include "pool_internal.h"

void pool_dirty_insert(pool_dirty *d, pool_block *b)
{
    unsigned i = pool_bin_of(b->size);
    b->left = NULL;
    b->right = d->head[i];
    if (b->right)
        b->right->left = b;
    d->head[i] = b;
    d->map[i / 64] |= 1ull << (i % 64);
    d->count++;
}

void pool_dirty_remove(pool_dirty *d, pool_block *b)
{
    unsigned i = pool_bin_of(b->size);
    if (b->left)
        b->left->right = b->right;
    else
        d->head[i] = b->right;
    if (b->right)
        b->right->left = b->left;
    if (!d->head[i])
        d->map[i / 64] &= ~(1ull << (i % 64));
    b->left = b->right = NULL;
    d->count--;
}

pool_block *pool_dirty_any(const pool_dirty *d)
{
    unsigned i = pool_bitmap_next(d->map, 0);
    return i < POOL_BINS ? d->head[i] : NULL;
}

bool pool_dirty_fits_below(const pool_dirty *d, size_t size, unsigned limit)
{
    unsigned own = pool_bin_of(size);
    if (own >= limit)
        return false;
    if (d->head[own] && d->head[own]->size >= size)
        return true;
    return pool_bitmap_next(d->map, own + 1) < limit;
}

bool pool_dirty_merged_fits(const pool_dirty *d, size_t size)
{
    for (unsigned i = pool_bitmap_next(d->map, 0); i < POOL_BINS;
         i = pool_bitmap_next(d->map, i + 1))
        for (const pool_block *b = d->head[i]; b; b = b->right) {
            size_t n = b->size;
            for (const pool_block *x = b->prev; x && x->free && n < size; x = x->prev)
                n += x->size;
            for (const pool_block *x = b->next; x && x->free && n < size; x = x->next)
                n += x->size;
            if (n >= size)
                return true;
        }
    return false;
}

size_t pool_dirty_max(const pool_dirty *d)
{
    for (unsigned w = POOL_BIN_WORDS; w-- > 0;) {
        if (!d->map[w])
            continue;
        unsigned i = w * 64 + 63 - (unsigned)__builtin_clzll(d->map[w]);
        size_t max = 0;
        for (const pool_block *b = d->head[i]; b; b = b->right)
            max = b->size > max ? b->size : max;
        return max;
    }
    return 0;
}

bool pool_dirty_contains(const pool_dirty *d, const pool_block *b)
{
    for (const pool_block *x = d->head[pool_bin_of(b->size)]; x; x = x->right)
        if (x == b)
            return true;
    return false;
}

int pool_dirty_check(const pool_dirty *d, size_t *count, char *why, size_t len)
{
    *count = 0;
    for (unsigned i = 0; i < POOL_BINS; i++) {
        bool marked = (d->map[i / 64] >> (i % 64)) & 1;
        if (marked != (d->head[i] != NULL)) {
            snprintf(why, len, "dirty bin %u: bitmap disagrees with its list", i);
            return -EFAULT;
        }
        for (const pool_block *b = d->head[i], *prev = NULL; b;
             prev = b, b = b->right) {
            if (b->left != prev || !b->free || !b->dirty ||
                pool_bin_of(b->size) != i) {
                snprintf(why, len, "dirty bin %u: bad entry %#lx", i,
                         (unsigned long)b->addr);
                return -EFAULT;
            }
            ++*count;
        }
    }
    if (*count != d->count) {
        snprintf(why, len, "dirty lists count %zu blocks, hold %zu", d->count,
                 *count);
        return -EFAULT;
    }
    return 0;
}
