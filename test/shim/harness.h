/* SPDX-License-Identifier: Apache-2.0 */
/*
 * harness.h - what every test-<feature>.c of test_shim shares: the
 * scenario programs (test/prog, drv_prog, python3) spawned preloaded with
 * the build under test, their output collected, the run's page directory,
 * and the test's own page directory (pages_setup/pages_teardown).
 * main.c lists the features; each test-<feature>.c ends with its tests.
 */
#ifndef CUPOOL_TEST_SHIM_HARNESS_H
#define CUPOOL_TEST_SHIM_HARNESS_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "comm.h"
#include "cupti.h"
#include "driver.h"
#include "real.h"
#include "signals.h"
#include "scratch.h"
#include "skip.h"

extern char **environ;

typedef struct result {
    int status;          /* exit code, or 128 + signal */
    char out[1 << 16];
    char err[1 << 16];
} result;

#ifndef READER
#define READER "build/cupool-stat"
#endif
#ifndef TRACER
#define TRACER "build/cupool-trace"
#endif
#ifndef BUILT
#define BUILT "build" /* the plain build: cupool-pause, the simulated libraries */
#endif

typedef struct child {
    pid_t pid;
    char out[96], err[96];
    bool reaped;   /* already waited for (wait_bounded), status in st */
    int st;
} child;

#define run(...) run_expecting(0, __VA_ARGS__)

#define PASSES(...) assert_int_equal(run(__VA_ARGS__, NULL)->status, 0)

/* The build variant under test (build, build/asan or build/tsan), the
 * sanitizer runtime preloaded ahead of it (NULL for none), the scenario
 * program start() runs, the run's page directory (main.c makes it), the
 * signals a test ignores on purpose for its children. */
extern sigset_t keep_ignored;
extern const char *dir;
extern const char *runtime;
extern const char *program;
extern char run_pages[96];
void slurp(const char *path, char *buf, size_t len);
void child_spawn(child *c, char *const argv[], const char *preload,
    char *const *extra);
void start(child *c, const char *scenario, va_list ap);
result *finish(child *c, const char *scenario, int expect);
result *finish_within(child *c, const char *scenario, int expect, int secs,
                      const char *what);
bool wait_bounded(child *c);
result *run_expecting(int expect, const char *scenario, ...);
child *spawn(child *c, const char *scenario, ...);
void python_start(child *c, const char *script, const char *arg, char **extra);
char *sim_lib_env(char *buf, size_t len);
int remove_tree(const char *path);
int shell(const char *cmd, char *out, size_t len);
void wait_for_file_then(const char *path, useconds_t settle_us);
void wait_for_file(const char *path);
const char *sim_cupti(void);
void link_refused(const char *var, const char *scenario, const char *extra,
    const char *expect);
void traceloop_start(child *c, const char *dirn, const char *extra);
result *traceloop_end(child *c, const char *dirn);
extern char pages[96];
int pages_setup(void **s);
int pages_teardown(void **s);
unsigned long pid_ns_ino(void);
void start_ready(child *c, const char *scenario, const char *tag, const char *e1,
    const char *e2);
void serve_start(child *c, const char *tag, const char *e1, const char *e2);
int wait_page(int pid, const char *cond);
double now_s(void);
int pause_run(const char *args, const char *fail, char *out, size_t len, char *calls,
    size_t clen);
int pause_state(int pid);
int replay_check(const char *trace, const char *asserts);

#endif
