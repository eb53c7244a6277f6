/*
 * tree.c - the free index: an AVL tree of free blocks keyed by
 * (size, address).
 *
 * Intrusive (the links live in pool_block), so inserting and removing never
 * allocate. Recursion depth is the tree height, at most 1.44 log2(n): 26
 * levels for a million free blocks.
 */
#include <errno.h>
#include <stdio.h>

#include "pool_internal.h"

static int height(const pool_block *b) { return b ? b->height : 0; }

static bool key_less(const pool_block *a, const pool_block *b)
{
    return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

static void update(pool_block *b)
{
    int hl = height(b->left), hr = height(b->right);
    b->height = 1 + (hl > hr ? hl : hr);
}

static pool_block *rotate_right(pool_block *y)
{
    pool_block *x = y->left;
    y->left = x->right;
    x->right = y;
    update(y);
    update(x);
    return x;
}

static pool_block *rotate_left(pool_block *x)
{
    pool_block *y = x->right;
    x->right = y->left;
    y->left = x;
    update(x);
    update(y);
    return y;
}

static pool_block *rebalance(pool_block *n)
{
    update(n);
    int bf = height(n->left) - height(n->right);
    if (bf > 1) {
        if (height(n->left->left) < height(n->left->right))
            n->left = rotate_left(n->left);
        return rotate_right(n);
    }
    if (bf < -1) {
        if (height(n->right->right) < height(n->right->left))
            n->right = rotate_right(n->right);
        return rotate_left(n);
    }
    return n;
}

static pool_block *insert(pool_block *n, pool_block *b)
{
    if (!n) {
        b->left = b->right = NULL;
        b->height = 1;
        return b;
    }
    if (key_less(b, n))
        n->left = insert(n->left, b);
    else
        n->right = insert(n->right, b);
    return rebalance(n);
}

static pool_block *remove_min(pool_block *n, pool_block **min)
{
    if (!n->left) {
        *min = n;
        return n->right;
    }
    n->left = remove_min(n->left, min);
    return rebalance(n);
}

static pool_block *remove_node(pool_block *n, pool_block *b)
{
    if (!n)
        return NULL;
    if (n == b) {
        pool_block *l = n->left, *r = n->right, *m;
        if (!r)
            return l;
        r = remove_min(r, &m);
        m->left = l;
        m->right = r;
        return rebalance(m);
    }
    if (key_less(b, n))
        n->left = remove_node(n->left, b);
    else
        n->right = remove_node(n->right, b);
    return rebalance(n);
}

void pool_tree_insert(pool_block **root, pool_block *b)
{
    *root = insert(*root, b);
}

void pool_tree_remove(pool_block **root, pool_block *b)
{
    *root = remove_node(*root, b);
    b->left = b->right = NULL;
}

pool_block *pool_tree_lower_bound(pool_block *n, size_t size)
{
    pool_block *best = NULL;
    while (n) {
        if (n->size >= size) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

pool_block *pool_tree_max(pool_block *n)
{
    while (n && n->right)
        n = n->right;
    return n;
}

bool pool_tree_contains(const pool_block *n, const pool_block *b)
{
    while (n && n != b)
        n = key_less(b, n) ? n->left : n->right;
    return n == b;
}

/* Walks the subtree checking that keys lie in (lo, hi) and heights are
 * right and balanced. */
static int check(const pool_block *n, const pool_block *lo,
                 const pool_block *hi, size_t *count, char *why, size_t len)
{
    if (!n)
        return 0;
    if ((lo && !key_less(lo, n)) || (hi && !key_less(n, hi))) {
        snprintf(why, len, "free index out of order at %#lx (%zu bytes)",
                 (unsigned long)n->addr, n->size);
        return -EFAULT;
    }
    int hl = height(n->left), hr = height(n->right);
    if (n->height != 1 + (hl > hr ? hl : hr) || hl - hr > 1 || hr - hl > 1) {
        snprintf(why, len, "free index unbalanced at %#lx",
                 (unsigned long)n->addr);
        return -EFAULT;
    }
    if (!n->free) {
        snprintf(why, len, "live block %#lx in the free index",
                 (unsigned long)n->addr);
        return -EFAULT;
    }
    ++*count;
    int err = check(n->left, lo, n, count, why, len);
    return err ? err : check(n->right, n, hi, count, why, len);
}

int pool_tree_check(const pool_block *root, size_t *count, char *why,
                    size_t len)
{
    *count = 0;
    return check(root, NULL, NULL, count, why, len);
}
