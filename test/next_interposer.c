/* SPDX-License-Identifier: Apache-2.0 */
/*
 * next_interposer.c - another interposer preloaded after cupool, as
 * profilers and sanitizers are: its getpid finds the next getpid with
 * dlsym(RTLD_NEXT). glibc resolves RTLD_NEXT from the caller's address, so
 * cupool's dlsym must pass such lookups on without a frame of its own:
 * resolved from cupool instead, the next getpid after cupool is this one,
 * and the call recurses until the stack runs out.
 */

#include <dlfcn.h>
#include <sys/types.h>
#include <unistd.h>

static pid_t (*next_getpid)(void);

pid_t getpid(void)
{
    if (!next_getpid)
        next_getpid = (pid_t (*)(void))dlsym(RTLD_NEXT, "getpid");
    return next_getpid();
}
