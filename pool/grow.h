/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grow.h - the one way cupool grows an array: doubling, from 16. Below
 * every layer (the pool, the shim, the trace tools and the tests use it).
 */
#ifndef CUPOOL_POOL_GROW_H
#define CUPOOL_POOL_GROW_H

#include <stdbool.h>
#include <stdlib.h>

/* Makes *a (an array of *cap elements of each bytes, n of them used) hold
 * at least n + 1, doubling its capacity. False, with *a unchanged, if out
 * of host memory. */
static inline bool pool_grow(void **a, size_t *cap, size_t n, size_t each)
{
    if (n < *cap)
        return true;
    size_t c = *cap ? 2 * *cap : 16;
    void *m = c <= (size_t)-1 / each ? realloc(*a, c * each) : NULL;
    if (!m)
        return false;
    *a = m;
    *cap = c;
    return true;
}

#endif
