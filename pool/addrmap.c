/* SPDX-License-Identifier: Apache-2.0 */
/*
 * addrmap.c - see addrmap.h.
 *
 * Keys are block addresses (POOL_ALIGN-aligned: the low nine bits carry
 * nothing) or small handles (only the low bits do): the hash folds the
 * bits above the ninth onto the low ones before mixing, so both spread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"

struct pool_addrmap_slot {
    uintptr_t key;   /* 0 = empty */
    void *val;
};

enum { ADDRMAP_MIN = 64 };

static size_t slot_of(const pool_addrmap *m, uintptr_t key)
{
    uint64_t h = ((uint64_t)key ^ (uint64_t)key >> 9) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & m->mask;
}

static int resize(pool_addrmap *m, size_t cap)
{
    struct pool_addrmap_slot *old = m->slots;
    size_t old_cap = old ? m->mask + 1 : 0;
    struct pool_addrmap_slot *s = calloc(cap, sizeof(*s));
    if (!s)
        return -ENOBUFS;
    m->slots = s;
    m->mask = cap - 1;
    m->count = 0;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key)
            pool_addrmap_put(m, old[i].key, old[i].val);
    free(old);
    return 0;
}

int pool_addrmap_init(pool_addrmap *m)
{
    m->slots = NULL;
    m->mask = 0;
    m->count = 0;
    return resize(m, ADDRMAP_MIN);
}

void pool_addrmap_fini(pool_addrmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->count = 0;
}

void pool_addrmap_clear(pool_addrmap *m)
{
    if (m->slots)
        memset(m->slots, 0, (m->mask + 1) * sizeof(*m->slots));
    m->count = 0;
}

int pool_addrmap_reserve(pool_addrmap *m)
{
    size_t cap = m->mask + 1;
    if ((m->count + 1) * 2 <= cap)
        return 0;
    return resize(m, m->slots ? cap * 2 : ADDRMAP_MIN);
}

void pool_addrmap_put(pool_addrmap *m, uintptr_t key, void *b)
{
    size_t i = slot_of(m, key);
    while (m->slots[i].key)
        i = (i + 1) & m->mask;
    m->slots[i].key = key;
    m->slots[i].val = b;
    m->count++;
}

void *pool_addrmap_get(const pool_addrmap *m, uintptr_t key)
{
    if (!key || !m->slots)
        return NULL;
    for (size_t i = slot_of(m, key); m->slots[i].key; i = (i + 1) & m->mask)
        if (m->slots[i].key == key)
            return m->slots[i].val;
    return NULL;
}

void *pool_addrmap_take(pool_addrmap *m, uintptr_t key)
{
    if (!key || !m->slots)
        return NULL; /* 0 marks empty slots; it is never a key */
    size_t i = slot_of(m, key);
    while (m->slots[i].key != key) {
        if (!m->slots[i].key)
            return NULL;
        i = (i + 1) & m->mask;
    }
    void *b = m->slots[i].val;
    /* Backward shift: pull later entries of the cluster into the hole when
     * their home slot does not lie cyclically in (hole, j]. */
    for (size_t j = (i + 1) & m->mask; m->slots[j].key; j = (j + 1) & m->mask) {
        size_t home = slot_of(m, m->slots[j].key);
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            m->slots[i] = m->slots[j];
            i = j;
        }
    }
    m->slots[i].key = 0;
    m->slots[i].val = NULL;
    m->count--;
    return b;
}

size_t pool_addrmap_drop_if(pool_addrmap *m, bool (*drop)(uintptr_t key, void *val, void *ctx),
                            void *ctx)
{
    size_t n = 0;
    for (size_t i = 0; m->slots && i <= m->mask;) {
        struct pool_addrmap_slot e = m->slots[i];
        if (e.key && drop(e.key, e.val, ctx)) {
            /* A later entry may have shifted into slot i: look again. One
             * shifted from the table's start (visited) is only asked twice. */
            pool_addrmap_take(m, e.key);
            n++;
        } else {
            i++;
        }
    }
    return n;
}
