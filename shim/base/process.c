/* SPDX-License-Identifier: Apache-2.0 */
/* process.c - see process.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "process.h"

shim_config shim_cfg;
_Thread_local int shim_inside;

static atomic_bool active;
static _Atomic uint64_t counters[SHIM_NCOUNTERS];
static int pipe_fd[2] = {-1, -1};
static atomic_bool helper_running;
static void (*_Atomic first_pool_hook)(void);

bool shim_active(void) { return atomic_load_explicit(&active, memory_order_relaxed); }

void shim_set_active(bool on) { atomic_store(&active, on); }

void shim_count(enum shim_counter c) { shim_count_add(c, 1); }

void shim_count_add(enum shim_counter c, uint64_t n)
{
    atomic_fetch_add_explicit(&counters[c], n, memory_order_relaxed);
}

void shim_gauge_set(enum shim_counter c, uint64_t v)
{
    atomic_store_explicit(&counters[c], v, memory_order_relaxed);
}

uint64_t shim_counter(enum shim_counter c) { return atomic_load(&counters[c]); }

void shim_comm(char *buf, size_t len)
{
    int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, len - 1) : 0;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n - (buf[n - 1] == '\n') : 0] = '\0';
}

uint64_t shim_unix_ns(void) { return clock_unix_ns(); }
uint64_t shim_mono_ns(void) { return clock_mono_ns(); }

int shim_doorbell_open(void)
{
    if (pipe2(pipe_fd, O_CLOEXEC) != 0)
        return -errno;
    fcntl(pipe_fd[1], F_SETFL, O_NONBLOCK);
    return 0;
}

int shim_doorbell_rd(void) { return pipe_fd[0]; }
int shim_doorbell_wr(void) { return pipe_fd[1]; }

void shim_doorbell_close(void)
{
    for (int i = 0; i < 2; i++)
        if (pipe_fd[i] >= 0)
            close(pipe_fd[i]), pipe_fd[i] = -1;
}

void shim_helper_set_running(bool on) { atomic_store(&helper_running, on); }

bool shim_helper_running(void)
{
    return atomic_load_explicit(&helper_running, memory_order_relaxed);
}

void shim_helper_wake(void)
{
    unsigned char b = SHIM_WAKE_DRAIN;
    if (shim_helper_running()) {
        ssize_t w = write(pipe_fd[1], &b, 1); /* full pipe: already woken */
        (void)w;
    }
}

void shim_on_first_pool(void (*start)(void)) { atomic_store(&first_pool_hook, start); }

void shim_first_pool(void)
{
    void (*start)(void) = atomic_load(&first_pool_hook);
    if (start)
        start();
}
