/* sim_backend.c - see sim_backend.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim_backend.h"

static int sim_reserve(void *ctx, size_t size, uintptr_t *base)
{
    sim_backend *s = ctx;
    if (s->fail_reserves > 0) {
        s->fail_reserves--;
        return -ENOMEM;
    }
    if (s->capacity && size > s->capacity - s->used)
        return -ENOMEM;
    if (s->nsegs == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        sim_segment *n = realloc(s->segs, cap * sizeof(*n));
        if (!n)
            return -ENOMEM;
        s->segs = n;
        s->cap = cap;
    }
    *base = s->next_base;
    s->segs[s->nsegs++] = (sim_segment){s->next_base, size};
    /* Leave a gap so that adjacent segments never look contiguous. */
    s->next_base += size + POOL_ALIGN;
    if (s->trim_unit)
        s->next_base = (s->next_base + s->trim_unit - 1) & ~(s->trim_unit - 1);
    s->used += size;
    s->reserves++;
    return 0;
}

static void sim_release(void *ctx, uintptr_t base, size_t size)
{
    sim_backend *s = ctx;
    for (size_t i = 0; i < s->nsegs; i++) {
        if (s->segs[i].base == base && s->segs[i].size == size) {
            s->segs[i] = s->segs[--s->nsegs];
            s->used -= size;
            s->releases++;
            return;
        }
    }
    s->bad_releases++;
}

static int sim_trim(void *ctx, uintptr_t addr, size_t size)
{
    sim_backend *s = ctx;
    if (s->trim_error)
        return s->trim_error;
    if (!size || addr % s->trim_unit || size % s->trim_unit)
        goto bad;
    for (size_t i = 0; i < s->nsegs; i++) {
        sim_segment g = s->segs[i];
        if (addr < g.base || addr + size > g.base + g.size)
            continue;
        /* [g.base, addr) and [addr + size, end) stay held. */
        size_t n = (addr > g.base) + (addr + size < g.base + g.size);
        if (n == 2 && s->nsegs == s->cap) {
            sim_segment *m = realloc(s->segs, 2 * s->cap * sizeof(*m));
            if (!m)
                return -ENOMEM;
            s->segs = m;
            s->cap *= 2;
        }
        s->segs[i] = s->segs[--s->nsegs];
        if (addr > g.base)
            s->segs[s->nsegs++] = (sim_segment){g.base, addr - g.base};
        if (addr + size < g.base + g.size)
            s->segs[s->nsegs++] = (sim_segment){addr + size,
                                                g.base + g.size - addr - size};
        s->used -= size;
        s->trims++;
        return 0;
    }
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

void sim_backend_fini(sim_backend *sim)
{
    free(sim->segs);
    memset(sim, 0, sizeof(*sim));
}

void sim_backend_enable_trim(sim_backend *sim, pool_backend *be, size_t unit)
{
    sim->trim_unit = unit;
    sim->next_base = (sim->next_base + unit - 1) & ~(unit - 1);
    be->trim = sim_trim;
    be->trim_unit = unit;
}
