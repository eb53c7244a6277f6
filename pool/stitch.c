/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stitch.c - stitching, for a backend that can map several ranges into one
 * (CUPOOL_STITCH, over CUDA's virtual memory management): when no free
 * block fits a large request, the whole trim units under clean free blocks
 * are mapped, with fresh memory for what they lack, into one new stitched
 * segment, so the pool grows by the shortfall only.
 *
 * A stitched segment holds no memory of its own: each part it maps stays a
 * block of its own segment, lent (neither free nor live) until the
 * stitched segment is idle again and unstitched. A stitch maps parts of
 * older segments only, so no two stitched segments map each other.
 *
 * Releasing idle segments (pool_release_idle) is here too: unstitching the
 * idle stitched segments first may leave whole segments idle under them,
 * and segment.c, below this file, calls nothing above it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pool_internal.h"

/* A stitched segment all of whose memory is one clean free block: it may
 * be unstitched, or grown in place. */
static bool stitched_idle(const pool_segment *s)
{
    return pool_segment_stitched(s) && s->live == 0 && !s->first->next &&
           !s->first->dirty;
}

/* Unstitches segment i (stitched, idle, one clean block): its parts become
 * free blocks of their own segments again, merged with their neighbours. */
static void segment_unstitch(pool *p, size_t i)
{
    pool_segment *s = p->segs[i];
    pool_index_del(p, s->first);
    pool_node_give(p, s->first);
    p->be.unstitch(p->be.ctx, s->base, s->size);
    for (size_t k = 0; k < s->nparts; k++) {
        pool_block *b = s->parts[k];
        b->lent = NULL;
        if (--b->seg->live == 0)
            p->idle_bytes += pool_segment_idle_size(b->seg);
        pool_index_add(p, pool_block_coalesce(p, b));
    }
    memmove(&p->segs[i], &p->segs[i + 1],
            (p->nsegs - i - 1) * sizeof(*p->segs));
    p->nsegs--;
    p->stitched_segs--;
    free(s->parts);
    free(s);
}

/* Unstitches every stitched segment whose blocks are all free and clean.
 * Returns how many. */
size_t pool_unstitch_idle(pool *p)
{
    size_t n = 0;
    for (size_t i = p->nsegs; p->stitched_segs && i-- > 0;) {
        pool_segment *s = p->segs[i];
        if (stitched_idle(s)) {
            segment_unstitch(p, i);
            n++;
        }
    }
    return n;
}

/* Unstitches every idle stitched segment, then releases segments with no
 * live block until idle bytes are at most keep. Returns the bytes
 * released. */
size_t pool_release_idle(pool *p, size_t keep)
{
    size_t released = 0;
    if (p->idle_bytes > keep || keep == 0)
        pool_unstitch_idle(p); /* their parts may leave whole segments idle */
    for (size_t i = p->nsegs; i-- > 0 && p->idle_bytes > keep;) {
        pool_segment *s = p->segs[i];
        if (s->live == 0 && !pool_segment_stitched(s)) {
            released += s->size;
            pool_segment_release(p, i);
        }
    }
    return released;
}

/* Takes [lo, lo + size) (inside clean free block b) out of use as a part
 * of stitched segment s, and returns the part's block. Needs two spare
 * nodes. */
static pool_block *part_carve(pool *p, pool_block *b, uintptr_t lo,
                              size_t size, pool_segment *s)
{
    pool_index_del(p, b);
    if (lo > b->addr) { /* b keeps the head */
        pool_block_split(p, b, lo - b->addr);
        pool_block *r = b->next;
        pool_index_del(p, r);
        pool_index_add(p, b);
        b = r;
    }
    if (b->size > size)
        pool_block_split(p, b, size);
    b->lent = s;
    if (b->seg->live++ == 0)
        p->idle_bytes -= pool_segment_idle_size(b->seg);
    return b;
}

/* Takes collected units from the front of c (nc of them), the last one
 * cut short, until want bytes: returns the bytes taken (less than want if
 * c runs out) and in *n how many units. */
static size_t units_take(pool_part *c, long nc, size_t want, size_t *n)
{
    size_t have = 0;
    for (*n = 0; *n < (size_t)nc && have < want; (*n)++) {
        if (c[*n].size > want - have)
            c[*n].size = want - have;
        have += c[*n].size;
    }
    return have;
}

/* Extends the largest idle stitched segment (one clean free block) that
 * is smaller than a large request of size bytes but at least half of it,
 * with the whole units under clean free blocks (no fresh memory; of
 * segments older than it), mapped at its end: its mapped part stays,
 * where unstitching and stitching anew would map all of it again.
 * Returns 0 with its block (the grown segment) in *out, 1 if no segment
 * qualifies or the free units or the backend cannot serve it, or -ENOBUFS. */
static int stitch_extend(pool *p, size_t size, pool_block **out)
{
    size_t u = p->be.trim_unit, want = pool_round_up(size, u);
    pool_segment *t = NULL;
    for (size_t i = 0; p->be.extend && i < p->nsegs; i++) {
        pool_segment *s = p->segs[i];
        if (stitched_idle(s) && s->size < want && s->size >= want / 2 &&
            (!t || s->size > t->size))
            t = s;
    }
    if (!t)
        return 1;
    size_t extra = want - t->size, n;
    pool_part *c = NULL;
    long nc = pool_units_collect(p, true, t->seq, &c);
    if (nc < 0)
        return -ENOBUFS;
    size_t have = units_take(c, nc, extra, &n);
    pool_span *sp = have < extra ? NULL : malloc(n * sizeof(*sp));
    pool_block **parts = !sp ? NULL : realloc(t->parts, (t->nparts + n) * sizeof(*parts));
    int err = have < extra ? 1 : !sp || !parts ? -ENOBUFS : pool_nodes_reserve(p, (int)(2 * n));
    if (parts)
        t->parts = parts;
    if (!err) {
        for (size_t k = 0; k < n; k++)
            sp[k] = (pool_span){c[k].lo, c[k].size};
        if (p->be.extend(p->be.ctx, t->base, t->size, sp, n) != 0)
            err = 1; /* a new stitch may still serve it */
    }
    free(sp);
    if (err) {
        free(c);
        return err;
    }
    for (size_t k = 0; k < n; k++)
        t->parts[t->nparts + k] = part_carve(p, c[k].b, c[k].lo, c[k].size, t);
    t->nparts += n;
    free(c);
    pool_block *b = t->first;
    pool_index_del(p, b);
    b->size += extra;
    t->size += extra;
    pool_index_add(p, b);
    p->st.stitches++;
    p->st.stitched_bytes_total += extra;
    *out = b;
    return 0;
}

/* Has the backend map spans sp (s->nparts of them) as stitched segment s
 * (its size set, its base to come). Returns 0, or 1 if the backend could
 * not (plain growth may still serve the request): then the fresh block
 * fb's segment, if any, is released again. */
static int stitch_map(pool *p, pool_segment *s, const pool_span *sp,
                      pool_block *fb)
{
    int e = p->be.stitch(p->be.ctx, sp, s->nparts, &s->base);
    if (!e && (!s->base || s->base % p->be.trim_unit)) {
        p->be.unstitch(p->be.ctx, s->base, s->size);
        e = -EFAULT; /* a broken backend: nothing is used */
    }
    if (e && fb)
        pool_segment_release(p, (size_t)pool_segment_find(p, fb->addr));
    return e ? 1 : 0;
}

/* Puts mapped stitched segment s in place: its parts carved out of the
 * first n units of c (then freed) and fresh block fb (if any; the rest of
 * the segment after the units' have bytes), and its memory one clean free
 * block, returned. Needs the nodes and the room in p->segs reserved. */
static pool_block *stitch_install(pool *p, pool_segment *s, pool_part *c,
                                  size_t n, size_t have, pool_block *fb)
{
    pool_segs_insert(p, s); /* room was made */
    for (size_t k = 0; k < n; k++)
        s->parts[k] = part_carve(p, c[k].b, c[k].lo, c[k].size, s);
    if (fb)
        s->parts[n] = part_carve(p, fb, fb->addr, s->size - have, s);
    free(c);
    p->stitched_segs++;
    p->stitch_seq++;
    p->st.stitches++;
    p->st.stitched_bytes_total += have;
    pool_block *b = pool_node_take(p);
    *b = (pool_block){.addr = s->base, .size = s->size, .seg = s};
    s->first = b;
    pool_index_add(p, b);
    return b;
}

/* Maps units from the front of c (nc of them, freed), with a fresh
 * segment for what they lack, into one new stitched segment of want bytes.
 * Nodes: two a part (its carve's head and tail), the fresh segment's block
 * and the stitched segment's.
 * Returns 0 with its block in *out, 1 if the backend could not, or a
 * negative errno (host memory, or the fresh segment's: the cap, the
 * device). */
static int stitch_new(pool *p, pool_part *c, long nc, size_t want,
                      pool_block **out)
{
    size_t n, have = units_take(c, nc, want, &n);
    size_t fresh = want - have, np = n + (fresh != 0);
    pool_span *sp = malloc(np * sizeof(*sp));
    pool_segment *s = calloc(1, sizeof(*s));
    pool_block **parts = malloc(np * sizeof(*parts));
    int err = !sp || !s || !parts ? -ENOBUFS : pool_nodes_reserve(p, (int)(2 * np + 2));
    pool_block *fb = NULL;
    if (!err && fresh)
        err = pool_segment_grow(p, POOL_LARGE, fresh, &fb);
    if (!err)
        err = pool_segs_room(p);
    if (!err) {
        for (size_t k = 0; k < n; k++)
            sp[k] = (pool_span){c[k].lo, c[k].size};
        if (fb)
            sp[n] = (pool_span){fb->addr, fresh};
        *s = (pool_segment){.kind = POOL_LARGE, .size = want, .parts = parts,
                            .nparts = np, .seq = p->stitch_seq + 1};
        err = stitch_map(p, s, sp, fb);
    }
    free(sp);
    if (err) { /* the fresh segment's error (the cap, the device) stands */
        free(c);
        free(parts);
        free(s);
        return err;
    }
    *out = stitch_install(p, s, c, n, have, fb);
    return 0;
}

/* Serves a large request of size bytes with a stitched segment, when no
 * free block fits it. First extends an idle stitched segment almost large
 * enough, if free units cover the rest. Else unstitches idle stitched
 * segments and looks again (a stitched segment that does not fit is
 * memory in the way). Then maps the whole trim units under clean free
 * blocks, the smallest first (fragments nothing else can use), with a
 * fresh segment for what they lack, into one new segment: the pool grows
 * by the shortfall only. Returns 0 with the new segment's block in *out,
 * 1 if there is nothing to stitch (or the backend could not; plain growth
 * follows), or a negative errno (the fresh segment's). */
int pool_stitch_grow(pool *p, size_t size, pool_block **out)
{
    int ext = stitch_extend(p, size, out);
    if (ext <= 0)
        return ext;
    if (pool_unstitch_idle(p) && (*out = pool_find_fit(p, POOL_LARGE, size)) != NULL)
        return 0;
    size_t want = pool_round_up(size, p->be.trim_unit);
    pool_part *c = NULL;
    long nc = want ? pool_units_collect(p, true, UINT64_MAX, &c) : 0;
    if (nc <= 0)
        return 1;
    return stitch_new(p, c, nc, want, out);
}
