/* SPDX-License-Identifier: Apache-2.0 */
/*
 * say.c - see say.h.
 */
#include <stdarg.h>
#include <stdio.h>

#include "say.h"
#include "text.h"

static const char *me = "cupool";

void pause_say(const char *fmt, ...)
{
    char msg[2048], shown[sizeof(msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* A message may carry what a rank's page says (its gate's reason):
     * its user's words, made printable here, once for every message. */
    fprintf(stderr, "%s: %s\n", me, text_printable(msg, shown, sizeof(shown)));
}
