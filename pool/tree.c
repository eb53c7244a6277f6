/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tree.c - an intrusive AVL tree of free blocks keyed by (size, address),
 * with parent links and a cached minimum.
 *
 * Intrusive (the links live in pool_block), so updates never allocate.
 * Parent links let a known block be unlinked where it is, without a search
 * from the root; after an insert or a removal the walk back up stops at the
 * first subtree whose height did not change, so the expected rebalancing
 * work per update is constant. The cached minimum makes the smallest block
 * an O(1) answer; it is the usual answer, since a bin's smallest block is
 * the best fit for any request at or below its size.
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

/* Puts child where old hung under parent (or at the root). */
static void replace_child(pool_tree *t, pool_block *parent, pool_block *old,
                          pool_block *child)
{
    if (!parent)
        t->root = child;
    else if (parent->left == old)
        parent->left = child;
    else
        parent->right = child;
    if (child)
        child->parent = parent;
}

static pool_block *rotate_left(pool_tree *t, pool_block *x)
{
    pool_block *y = x->right;
    replace_child(t, x->parent, x, y);
    x->right = y->left;
    if (y->left)
        y->left->parent = x;
    y->left = x;
    x->parent = y;
    update(x);
    update(y);
    return y;
}

static pool_block *rotate_right(pool_tree *t, pool_block *y)
{
    pool_block *x = y->left;
    replace_child(t, y->parent, y, x);
    y->left = x->right;
    if (x->right)
        x->right->parent = y;
    x->right = y;
    y->parent = x;
    update(y);
    update(x);
    return x;
}

/* Restores balance at n; returns the subtree's new top. */
static pool_block *rebalance(pool_tree *t, pool_block *n)
{
    update(n);
    int bf = height(n->left) - height(n->right);
    if (bf > 1) {
        if (height(n->left->left) < height(n->left->right))
            rotate_left(t, n->left);
        return rotate_right(t, n);
    }
    if (bf < -1) {
        if (height(n->right->right) < height(n->right->left))
            rotate_right(t, n->right);
        return rotate_left(t, n);
    }
    return n;
}

/* Rebalances from n up, stopping once a subtree keeps its old height. */
static void retrace(pool_tree *t, pool_block *n)
{
    while (n) {
        int before = n->height;
        n = rebalance(t, n);
        if (n->height == before)
            return;
        n = n->parent;
    }
}

static pool_block *leftmost(pool_block *n)
{
    while (n && n->left)
        n = n->left;
    return n;
}

void pool_tree_insert(pool_tree *t, pool_block *b)
{
    pool_block *parent = NULL, **link = &t->root;
    while (*link) {
        parent = *link;
        link = key_less(b, parent) ? &parent->left : &parent->right;
    }
    b->left = b->right = NULL;
    b->height = 1;
    b->parent = parent;
    *link = b;
    if (!t->min || key_less(b, t->min))
        t->min = b;
    retrace(t, parent);
}

void pool_tree_remove(pool_tree *t, pool_block *b)
{
    if (t->min == b) /* the minimum has no left child */
        t->min = b->right ? leftmost(b->right) : b->parent;
    pool_block *start;
    if (b->left && b->right) {
        pool_block *s = leftmost(b->right);
        if (s->parent != b) {
            start = s->parent;
            replace_child(t, s->parent, s, s->right);
            s->right = b->right;
            b->right->parent = s;
        } else {
            start = s;
        }
        s->left = b->left;
        b->left->parent = s;
        replace_child(t, b->parent, b, s);
        s->height = b->height;
    } else {
        start = b->parent;
        replace_child(t, b->parent, b, b->left ? b->left : b->right);
    }
    b->left = b->right = b->parent = NULL;
    retrace(t, start);
}

pool_block *pool_tree_lower_bound(const pool_tree *t, size_t size)
{
    if (!t->min || t->min->size >= size)
        return t->min;
    pool_block *best = NULL;
    for (pool_block *n = t->root; n;) {
        if (n->size >= size) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

pool_block *pool_tree_max(const pool_tree *t)
{
    pool_block *n = t->root;
    while (n && n->right)
        n = n->right;
    return n;
}

bool pool_tree_contains(const pool_tree *t, const pool_block *b)
{
    const pool_block *n = t->root;
    while (n && n != b)
        n = key_less(b, n) ? n->left : n->right;
    return n == b;
}

/* Walks the subtree checking that keys lie in (lo, hi), that heights are
 * right and balanced, and that parent links match. */
static int check(const pool_block *n, const pool_block *parent,
                 const pool_block *lo, const pool_block *hi, size_t *count,
                 char *why, size_t len)
{
    if (!n)
        return 0;
    unsigned long a = (unsigned long)n->addr;
    if ((lo && !key_less(lo, n)) || (hi && !key_less(n, hi))) {
        snprintf(why, len, "free index out of order at %#lx (%zu bytes)", a,
                 n->size);
        return -EFAULT;
    }
    int hl = height(n->left), hr = height(n->right);
    if (n->height != 1 + (hl > hr ? hl : hr) || hl - hr > 1 || hr - hl > 1) {
        snprintf(why, len, "free index unbalanced at %#lx", a);
        return -EFAULT;
    }
    if (n->parent != parent || !n->free) {
        snprintf(why, len, "free index: bad parent link or live block at %#lx",
                 a);
        return -EFAULT;
    }
    ++*count;
    int err = check(n->left, n, lo, n, count, why, len);
    return err ? err : check(n->right, n, n, hi, count, why, len);
}

int pool_tree_check(const pool_tree *t, size_t *count, char *why, size_t len)
{
    *count = 0;
    int err = check(t->root, NULL, NULL, NULL, count, why, len);
    if (!err && t->min != leftmost(t->root)) {
        snprintf(why, len, "free index: cached minimum is stale");
        err = -EFAULT;
    }
    return err;
}
