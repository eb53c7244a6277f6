/*
 * passed.c - see passed.h. One map from (kind, key) to (device, size),
 * open addressing with linear probing and backward-shift deletion, under
 * one mutex: these calls are the slow ones (each is a driver call of
 * microseconds), never the pool's fast path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "device.h"
#include "log.h"
#include "passed.h"
#include "stats.h"

typedef struct entry {
    uintptr_t key; /* 0 = empty */
    uint64_t size;
    int dev, kind;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry *slots;
static size_t mask, count;

static size_t slot_of(uintptr_t key, int kind)
{
    uint64_t h = ((uint64_t)key ^ (uint64_t)kind << 60) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 29)) & mask;
}

static void put(entry e)
{
    size_t i = slot_of(e.key, e.kind);
    while (slots[i].key)
        i = (i + 1) & mask;
    slots[i] = e;
    count++;
}

/* Room for one more at load 1/2 or less. Needs lock. */
static bool room(void)
{
    if (slots && 2 * (count + 1) <= mask + 1)
        return true;
    size_t old_n = slots ? mask + 1 : 0, n = old_n ? 2 * old_n : 64;
    entry *old = slots, *s = calloc(n, sizeof(*s));
    if (!s)
        return false;
    slots = s;
    mask = n - 1;
    count = 0;
    for (size_t i = 0; i < old_n; i++)
        if (old[i].key)
            put(old[i]);
    free(old);
    return true;
}

/* Removes slot i, shifting the probe chain behind it back. Needs lock. */
static void drop(size_t i)
{
    size_t j = i;
    for (;;) {
        slots[i].key = 0;
        for (;;) {
            j = (j + 1) & mask;
            if (!slots[j].key) {
                count--;
                return;
            }
            size_t home = slot_of(slots[j].key, slots[j].kind);
            /* j may move to i if its home is not in (i, j]. */
            if (i <= j ? (home <= i || home > j) : (home <= i && home > j))
                break;
        }
        slots[i] = slots[j];
        i = j;
    }
}

static void note_peak(shim_device *d, uint64_t now)
{
    uint64_t peak = atomic_load(&d->passed_peak);
    while (now > peak && !atomic_compare_exchange_weak(&d->passed_peak, &peak, now))
        ;
}

int shim_passed_take(int dev, size_t size, const char *call)
{
    shim_device *d = &shim_devices[dev];
    /* Never makes the pool (its creation calls the runtime, which may be
     * the caller, holding its locks: NCCL's and the runtime's own
     * cuMemCreate come here). */
    uint64_t cap = call ? shim_device_cap(dev) : 0;
    if (!cap) {
        note_peak(d, atomic_fetch_add(&d->passed, size) + size);
        return 0;
    }
    for (int attempt = 0;; attempt++) {
        uint64_t now = atomic_fetch_add(&d->passed, size) + size;
        if (now + atomic_load(&d->reserved) <= cap) {
            note_peak(d, now);
            return 0;
        }
        atomic_fetch_sub(&d->passed, size);
        if (attempt == 1 || !shim_device_shard_if_any(dev, 0) || shim_device_flush(dev) == 0)
            break;
    }
    char rq[32], c[32], r[32], p[32];
    shim_log(SHIM_LOG_ERROR, "device %d: %s(%s) refused: the cap %s would be "
             "exceeded (pool reserved %s, passed on %s)", dev, call,
             stats_fmt_bytes(size, rq, sizeof(rq)), stats_fmt_bytes(cap, c, sizeof(c)),
             stats_fmt_bytes(atomic_load(&d->reserved), r, sizeof(r)),
             stats_fmt_bytes(atomic_load(&d->passed), p, sizeof(p)));
    return -EDQUOT;
}

void shim_passed_untake(int dev, size_t size)
{
    atomic_fetch_sub(&shim_devices[dev].passed, size);
}

void shim_passed_settle(int dev, bool ok, int kind, uintptr_t key, size_t took, size_t size)
{
    if (dev < 0)
        return;
    if (!ok || !key) {
        shim_passed_untake(dev, took);
        return;
    }
    /* A pitched allocation is larger than asked: made already, counted. */
    if (size > took)
        shim_passed_take(dev, size - took, NULL);
    else if (size < took)
        shim_passed_untake(dev, took - size);
    shim_passed_record(dev, kind, key, size);
}

void shim_passed_record(int dev, int kind, uintptr_t key, size_t size)
{
    pthread_mutex_lock(&lock);
    bool ok = key && room();
    if (ok)
        put((entry){key, size, dev, kind});
    pthread_mutex_unlock(&lock);
    if (!ok) /* never freed as far as the count knows: say so */
        shim_log(SHIM_LOG_WARN, "device %d: out of host memory; %zu bytes passed "
                 "on stay counted after they are freed", dev, size);
}

bool shim_passed_release(int kind, uintptr_t key)
{
    bool found = false;
    pthread_mutex_lock(&lock);
    if (slots && key) {
        for (size_t i = slot_of(key, kind); slots[i].key; i = (i + 1) & mask) {
            if (slots[i].key != key || slots[i].kind != kind)
                continue;
            atomic_fetch_sub(&shim_devices[slots[i].dev].passed, slots[i].size);
            drop(i);
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

void shim_passed_forget_device(int dev)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; slots && i <= mask;) {
        if (slots[i].key && slots[i].dev == dev)
            drop(i); /* a later entry may have moved into i: look again */
        else
            i++;
    }
    atomic_store(&shim_devices[dev].passed, 0);
    pthread_mutex_unlock(&lock);
}
