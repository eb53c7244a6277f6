/* SPDX-License-Identifier: Apache-2.0 */
/*
 * text.c - see text.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "text.h"

void text_put(text_buf *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->n < t->len ? t->buf + t->n : NULL,
                      t->n < t->len ? t->len - t->n : 0, fmt, ap);
    va_end(ap);
    if (k > 0)
        t->n += (size_t)k;
}

void text_str(text_buf *t, const char *s)
{
    size_t k = strlen(s);
    if (t->n < t->len)
        memcpy(t->buf + t->n, s, k < t->len - t->n ? k : t->len - t->n);
    t->n += k;
}

size_t text_done(text_buf *t)
{
    if (t->len)
        t->buf[t->n < t->len ? t->n : t->len - 1] = '\0';
    return t->n;
}

const char *text_printable(const char *s, char *buf, size_t len)
{
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++)
        buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}
