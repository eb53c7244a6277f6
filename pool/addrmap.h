/* SPDX-License-Identifier: Apache-2.0 */
/*
 * addrmap.h - a map from nonzero integer keys (addresses, handles) to
 * pointers: open addressing, linear probing, backward-shift deletion (no
 * tombstones, so probe lengths stay short under endless insert/remove
 * churn), load factor at most 1/2. The pool keeps its live blocks in one;
 * the shim its memory passed on.
 *
 * Thread safety: none; the owner locks.
 */
#ifndef CUPOOL_POOL_ADDRMAP_H
#define CUPOOL_POOL_ADDRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pool_addrmap {
    struct pool_addrmap_slot *slots;
    size_t mask;   /* capacity - 1; capacity is a power of two */
    size_t count;
} pool_addrmap;

/* 0 or -ENOBUFS. A map of zeroes is an empty map too (its first reserve
 * allocates). */
int pool_addrmap_init(pool_addrmap *m);
void pool_addrmap_fini(pool_addrmap *m);
void pool_addrmap_clear(pool_addrmap *m);
/* Makes room for one more entry; the only call that allocates. 0/-ENOBUFS. */
int pool_addrmap_reserve(pool_addrmap *m);
/* Inserts key (nonzero, not present). Needs a prior pool_addrmap_reserve. */
void pool_addrmap_put(pool_addrmap *m, uintptr_t key, void *val);
/* key's value, or NULL if absent. */
void *pool_addrmap_get(const pool_addrmap *m, uintptr_t key);
/* Removes key and returns its value, or NULL if absent. */
void *pool_addrmap_take(pool_addrmap *m, uintptr_t key);
/* Removes every entry for which drop(key, value, ctx) is true (it may free
 * the value) and returns how many. */
size_t pool_addrmap_drop_if(pool_addrmap *m, bool (*drop)(uintptr_t key, void *val, void *ctx),
                            void *ctx);

#endif /* CUPOOL_POOL_ADDRMAP_H */
