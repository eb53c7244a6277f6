/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace_gz.c - reading gzip'd traces (the ones shipped in test/data, and
 * what a user compressed), for the trace tools only: libcupool.so writes
 * plain traces and does not link zlib.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "trace.h"
#include "trace_gz.h"

enum { GZ_FREE = 64 << 20, GZ_RATIO = 200 };

/* Replaces *buf (gzip data, *got bytes) with what it decompresses to. 0,
 * or -1 with why (bad data, cut short, or past the bound). */
static int gunzip(const char *path, unsigned char **buf, size_t *got, char *why,
                  size_t len)
{
    size_t limit = *got > (SIZE_MAX - GZ_FREE) / GZ_RATIO ? SIZE_MAX
                                                          : GZ_FREE + GZ_RATIO * *got;
    z_stream z;
    memset(&z, 0, sizeof(z));
    int started = inflateInit2(&z, 16 + MAX_WBITS);
    if (started != Z_OK) {
        snprintf(why, len, "%s: zlib cannot start (%s)", path,
                 started == Z_MEM_ERROR ? "out of host memory" : "zlib's error");
        return -1;
    }
    size_t cap = 1 << 20, n = 0;
    unsigned char *out = malloc(cap);
    z.next_in = *buf;
    z.avail_in = (uInt)(*got > UINT32_MAX ? UINT32_MAX : *got);
    int r = Z_OK;
    const char *err = NULL;
    while (out && !err) {
        if (n == cap) {
            size_t ncap = cap > limit / 2 ? limit : cap * 2;
            if (ncap <= cap) {
                err = "decompresses past 64 MiB and 200 times its size: refused";
                break;
            }
            unsigned char *nb = realloc(out, ncap);
            if (!nb) {
                err = "out of memory";
                break;
            }
            out = nb;
            cap = ncap;
        }
        z.next_out = out + n;
        z.avail_out = (uInt)(cap - n > UINT32_MAX ? UINT32_MAX : cap - n);
        r = inflate(&z, Z_NO_FLUSH);
        n = (size_t)(z.next_out - out);
        if (r == Z_STREAM_END) {
            if (z.avail_in == 0)
                break;
            inflateReset(&z); /* another gzip member follows */
        } else if (r == Z_BUF_ERROR && z.avail_in == 0) {
            err = "the gzip data is cut short";
        } else if (r != Z_OK && r != Z_BUF_ERROR) {
            err = z.msg ? z.msg : "bad gzip data";
        }
    }
    inflateEnd(&z);
    if (!out || err) {
        snprintf(why, len, "%s: %s", path, out ? err : "out of memory");
        free(out);
        return -1;
    }
    free(*buf);
    *buf = out;
    *got = n;
    return 0;
}

int trace_load_any(const char *path, trace *t, char *why, size_t len)
{
    unsigned char *buf;
    size_t got;
    memset(t, 0, sizeof(*t));
    if (trace_read_all(path, &buf, &got, why, len))
        return -1;
    if (got >= 2 && buf[0] == 0x1f && buf[1] == 0x8b && gunzip(path, &buf, &got, why, len)) {
        free(buf);
        return -1;
    }
    return trace_parse(path, buf, got, t, why, len);
}
