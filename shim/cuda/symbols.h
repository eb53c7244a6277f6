/* SPDX-License-Identifier: Apache-2.0 */
/*
 * symbols.h - finding functions in the process's libraries without cupool
 * answering: glibc's own dlsym, however the process reached cupool's
 * (dlsym.c).
 */
#ifndef CUPOOL_SHIM_SYMBOLS_H
#define CUPOOL_SHIM_SYMBOLS_H

/* The real dlsym (glibc's, whichever version node it has): lookups that
 * must not be answered with cupool's functions. */
void *shim_dlsym(void *handle, const char *name);

/* name's definition after cupool's (in the library the program linked),
 * else in the first library of sonames (NULL-terminated) already loaded:
 * a plugin may have loaded it RTLD_LOCAL, out of RTLD_NEXT's sight; one the
 * program did not load is never loaded (RTLD_NOLOAD, and the reference
 * taken keeps it). NULL if none has it. */
void *shim_dlsym_loaded(const char *name, const char *const *sonames);

#endif
