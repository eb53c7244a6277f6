/* SPDX-License-Identifier: Apache-2.0 */
/* sim_backend.c - see sim_backend.h. */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "sim_backend.h"

/* Takes span bytes of fresh addresses (and a gap, so that neighbours never
 * look contiguous), aligned to the unit: 0, or -ENOMEM if they ran out. */
static int addresses(sim_backend *s, size_t span, uintptr_t *base)
{
    uintptr_t u = s->trim_unit ? s->trim_unit : 1;
    if (span > SIM_SPACE || s->next_base > SIM_SPACE)
        return -ENOMEM;
    *base = s->next_base;
    s->next_base = (s->next_base + span + POOL_ALIGN + u - 1) & ~(u - 1);
    return 0;
}

/* Holds the range [base, base + size): 0 or -ENOBUFS (host memory). */
static int hold(sim_backend *s, uintptr_t base, size_t size)
{
    sim_segment *g = malloc(sizeof(*g));
    if (!g || pool_addrmap_reserve(&s->segs) != 0) {
        free(g);
        return -ENOBUFS;
    }
    *g = (sim_segment){base, size};
    pool_addrmap_put(&s->segs, base, g);
    s->nsegs++;
    if (size > s->seg_max)
        s->seg_max = size;
    return 0;
}

/* The range held that holds addr, or NULL. Every range's base is a
 * multiple of the unit (of 1 without one: then only a base is found), so
 * the bases below addr are looked up one unit at a time, as far down as
 * the largest range reaches. */
static sim_segment *holding(const sim_backend *s, uintptr_t addr)
{
    uintptr_t u = s->trim_unit ? s->trim_unit : 1;
    for (uintptr_t b = addr & ~(u - 1);; b -= u) {
        sim_segment *g = pool_addrmap_get(&s->segs, b);
        if (g) /* the nearest base at or below addr: ranges are disjoint */
            return addr - g->base < g->size ? g : NULL;
        if (!s->trim_unit || b < u || addr - (b - u) >= s->seg_max)
            return NULL;
    }
}

static int sim_reserve(void *ctx, size_t size, uintptr_t *base)
{
    sim_backend *s = ctx;
    if (s->fail_reserves > 0) {
        s->fail_reserves--;
        return -ENOMEM;
    }
    if (s->capacity && size > s->capacity - s->used)
        return -ENOMEM;
    uintptr_t b;
    int err = addresses(s, size, &b);
    if (!err)
        err = hold(s, b, size);
    if (err)
        return err;
    *base = b;
    s->used += size;
    s->reserves++;
    return 0;
}

/* True if [addr, addr + size) holds memory a stitch maps. */
static bool stitched_into(const sim_backend *s, uintptr_t addr, size_t size)
{
    for (size_t i = 0; i < s->nst; i++)
        for (size_t k = 0; k < s->st[i].n; k++) {
            const pool_span *p = &s->st[i].parts[k];
            if (p->addr < addr + size && addr < p->addr + p->size)
                return true;
        }
    return false;
}

static void sim_release(void *ctx, uintptr_t base, size_t size)
{
    sim_backend *s = ctx;
    if (stitched_into(s, base, size)) {
        s->bad_releases++;
        return;
    }
    sim_segment *g = pool_addrmap_get(&s->segs, base);
    if (!g || g->size != size) {
        s->bad_releases++;
        return;
    }
    free(pool_addrmap_take(&s->segs, base));
    s->nsegs--;
    s->used -= size;
    s->releases++;
}

static int sim_trim(void *ctx, uintptr_t addr, size_t size)
{
    sim_backend *s = ctx;
    if (s->trim_error)
        return s->trim_error;
    if (!size || addr % s->trim_unit || size % s->trim_unit ||
        stitched_into(s, addr, size))
        goto bad;
    sim_segment *h = holding(s, addr);
    if (!h || addr + size > h->base + h->size)
        goto bad;
    /* [h->base, addr) and [addr + size, end) stay held. */
    uintptr_t end = h->base + h->size;
    if (addr + size < end && hold(s, addr + size, end - addr - size) != 0)
        return -ENOBUFS;
    if (addr > h->base) {
        h->size = addr - h->base;
    } else {
        free(pool_addrmap_take(&s->segs, h->base));
        s->nsegs--;
    }
    s->used -= size;
    s->trims++;
    return 0;
bad:
    s->bad_trims++;
    return -EINVAL;
}

static int sim_fence(void *ctx)
{
    sim_backend *s = ctx;
    if (s->fence_error)
        return s->fence_error;
    s->fences++;
    return 0;
}

static int sim_fence_begin(void *ctx, uint64_t *ticket)
{
    sim_backend *s = ctx;
    if (s->fence_error)
        return s->fence_error;
    s->begins++;
    *ticket = ++s->tickets;
    return 0;
}

static int sim_fence_poll(void *ctx, bool force, uint64_t *done)
{
    sim_backend *s = ctx;
    if (s->fence_error && s->fence_error != -EAGAIN)
        return s->fence_error;
    s->polls++;
    if (force && !s->no_force && s->done < s->tickets) {
        s->forces++;
        s->done++;
    }
    *done = s->done;
    return 0;
}

void sim_backend_enable_async(sim_backend *sim, pool_backend *be)
{
    (void)sim;
    be->fence_begin = sim_fence_begin;
    be->fence_poll = sim_fence_poll;
}

void sim_backend_init(sim_backend *sim, size_t capacity, pool_backend *be)
{
    memset(sim, 0, sizeof(*sim));
    sim->next_base = (uintptr_t)1 << 32;
    sim->capacity = capacity;
    *be = (pool_backend){.reserve = sim_reserve, .release = sim_release,
                         .fence = sim_fence, .ctx = sim};
}

/* Index of the stitch holding va, or -1. */
static long stitch_find(const sim_backend *s, uintptr_t va)
{
    for (size_t i = 0; i < s->nst; i++)
        if (va >= s->st[i].base && va - s->st[i].base < s->st[i].size)
            return (long)i;
    return -1;
}

uintptr_t sim_backend_phys(const sim_backend *s, uintptr_t va, size_t *len)
{
    long i = stitch_find(s, va);
    if (i < 0) {
        const sim_segment *g = holding(s, va);
        *len = g ? g->base + g->size - va : 0;
        return g ? va : 0;
    }
    size_t off = va - s->st[i].base;
    for (size_t k = 0;; k++) {
        const pool_span *p = &s->st[i].parts[k];
        if (off < p->size) {
            size_t inner;
            uintptr_t ph = sim_backend_phys(s, p->addr + off, &inner);
            *len = inner < p->size - off ? inner : p->size - off;
            return ph;
        }
        off -= p->size;
    }
}

/* Checks n parts for a stitch (i: the stitch they extend, or -1): each
 * whole units, mapped, inside one range or one stitch other than i, and
 * in no stitch already. Returns their bytes, or 0 (counted bad). */
static size_t parts_check(sim_backend *s, const pool_span *parts, size_t n, long i)
{
    size_t size = 0;
    for (size_t k = 0; k < n; k++) {
        const pool_span *p = &parts[k];
        long in = p->size ? stitch_find(s, p->addr) : -1;
        bool ok = p->size && p->addr % s->trim_unit == 0 && p->size % s->trim_unit == 0 &&
                  in == stitch_find(s, p->addr + p->size - 1) && (i < 0 || in != i) &&
                  !stitched_into(s, p->addr, p->size);
        for (size_t off = 0, len; ok && off < p->size; off += len) {
            ok = sim_backend_phys(s, p->addr + off, &len) != 0 &&
                 (in >= 0 || len >= p->size - off);
        }
        if (!ok) {
            s->bad_stitches++;
            return 0;
        }
        size += p->size;
    }
    return size;
}

static pool_span *parts_copy(const pool_span *parts, size_t n, pool_span *to, size_t at)
{
    pool_span *c = realloc(to, (at + n) * sizeof(*c));
    if (c)
        memcpy(c + at, parts, n * sizeof(*c));
    return c;
}

static int sim_stitch_map(void *ctx, const pool_span *parts, size_t n, uintptr_t *base)
{
    sim_backend *s = ctx;
    if (s->stitch_error)
        return s->stitch_error;
    size_t size = parts_check(s, parts, n, -1);
    if (!size)
        return -EINVAL;
    if (!pool_grow((void **)&s->st, &s->st_cap, s->nst, sizeof(*s->st)))
        return -ENOBUFS;
    pool_span *copy = parts_copy(parts, n, NULL, 0);
    int err = !copy ? -ENOBUFS : addresses(s, 2 * size, base);
    if (err) {
        free(copy);
        return err;
    }
    s->st[s->nst++] = (sim_stitch){*base, size, n, 2 * size, copy};
    s->stitches++;
    return 0;
}

static int sim_extend(void *ctx, uintptr_t base, size_t size, const pool_span *parts,
                      size_t n)
{
    sim_backend *s = ctx;
    if (s->stitch_error)
        return s->stitch_error;
    long i = stitch_find(s, base);
    if (i < 0 || s->st[i].base != base || s->st[i].size != size) {
        s->bad_stitches++;
        return -EINVAL;
    }
    size_t more = parts_check(s, parts, n, i);
    if (!more)
        return -EINVAL;
    if (more > s->st[i].room - size)
        return -ENOSPC;
    pool_span *c = parts_copy(parts, n, s->st[i].parts, s->st[i].n);
    if (!c)
        return -ENOBUFS;
    s->st[i].parts = c;
    s->st[i].n += n;
    s->st[i].size += more;
    s->extends++;
    return 0;
}

static void sim_unstitch(void *ctx, uintptr_t base, size_t size)
{
    sim_backend *s = ctx;
    long i = stitch_find(s, base);
    /* A stitch still mapped into another goes last. */
    if (i < 0 || s->st[i].base != base || s->st[i].size != size ||
        stitched_into(s, base, size)) {
        s->bad_stitches++;
        return;
    }
    free(s->st[i].parts);
    s->st[i] = s->st[--s->nst];
    s->unstitches++;
}

void sim_backend_enable_stitch(sim_backend *sim, pool_backend *be)
{
    (void)sim;
    be->stitch = sim_stitch_map;
    be->unstitch = sim_unstitch;
    be->extend = sim_extend;
}

static bool drop_all(uintptr_t key, void *g, void *ctx)
{
    (void)key;
    (void)ctx;
    free(g);
    return true;
}

void sim_backend_fini(sim_backend *sim)
{
    for (size_t i = 0; i < sim->nst; i++)
        free(sim->st[i].parts);
    free(sim->st);
    pool_addrmap_drop_if(&sim->segs, drop_all, NULL);
    pool_addrmap_fini(&sim->segs);
    memset(sim, 0, sizeof(*sim));
}

void sim_backend_set_unit(sim_backend *sim, pool_backend *be, size_t unit)
{
    sim->trim_unit = unit;
    sim->next_base = (sim->next_base + unit - 1) & ~(unit - 1);
    be->trim_unit = unit;
}

void sim_backend_enable_trim(sim_backend *sim, pool_backend *be, size_t unit)
{
    sim_backend_set_unit(sim, be, unit);
    be->trim = sim_trim;
}
