/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prog.h - rt_prog: scenarios run under LD_PRELOAD=libcupool.so, linked
 * only against a CUDA runtime: the simulated one (build/sim, -DSIMCUDA) on
 * the CPU, the real one on a GPU. `rt_prog NAME` runs one scenario and
 * exits 0 if it held, 1 with a "FAIL:" line if not. test/shim runs them
 * with the environment each one needs. One file per feature, each ending
 * with its table of scenarios; main.c finds a scenario by its name.
 */
#ifndef CUPOOL_TEST_PROG_H
#define CUPOOL_TEST_PROG_H

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#ifdef SIMCUDA
#include <cuda.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include "simcuda.h"
#endif

/* A scenario: its name on the command line, and what runs it (0: it held). */
typedef struct prog_scenario {
    const char *name;
    int (*run)(void);
} prog_scenario;

#define MIB ((size_t)1 << 20)

/* Not declared by glibc's headers under _GNU_SOURCE, but exported. */
extern void (*bsd_signal(int sig, void (*h)(int)))(int);
extern char **environ;

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            printf("FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define OK(call) CHECK((call) == cudaSuccess)

/* common.c */
void sleep_ms(int ms);
void fill_segment(void **a, void **b);
void in_thread(void *(*fn)(void *), void *arg);

/* stats.c: the program's own SIGTERM and SIGUSR1 handlers (serve, job,
 * the signal scenarios) and the path of its statistics file. */
void stats_path(char *path, size_t len);
extern volatile sig_atomic_t stop;
void on_term(int sig);
extern atomic_int own_calls;
void on_own(int sig);

/* ipc.c: the device's bytes as the host sees them, and the importing
 * process that ipc and the VMM scenarios start. */
void dev_fill(void *p, int v, size_t n);
unsigned char dev_byte(const void *p);
extern int prog_argc;
extern char **prog_argv;
/* How many 10 ms ticks a scenario that waits for SIGTERM waits: `rt_prog
 * NAME SECONDS`, or seconds by default (the README's and the guide's
 * walk-throughs give a person time to type). */
int hold_ticks(int seconds);
int importer(const char *mode, const cudaIpcMemHandle_t *ha,
    const cudaIpcMemHandle_t *hb, char *extra);

/* vmm.c: what the importer opens of a stitched or a large block. */
int ipc_import_large(const cudaIpcMemHandle_t *h);
int ipc_import_stitched(const cudaIpcMemHandle_t *hd, const cudaIpcMemHandle_t *hi);

#ifdef SIMCUDA
simcuda_stats sim(int dev);

/* The simulated NCCL (build/sim/libnccl.so.2, beside this program's
 * rt/: by path, since a sanitizer's dlopen does not search this program's
 * run path), reached as a program linked against NCCL reaches it: through
 * the global scope, where the preloaded cupool comes first. */
typedef int (*nccl_allreduce_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*nccl_allgather_fn)(const void *, void *, size_t, int, void *, void *);
typedef int (*nccl_void_fn)(void);
void *sim_lib(const char *name, int flags);
void *nccl(const char *name);

/* cupti.c: subscribes to CUPTI as a profiler would. */
void program_subscribes(void);
#endif /* SIMCUDA */

#endif
