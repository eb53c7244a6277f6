/* SPDX-License-Identifier: Apache-2.0 */
/*
 * config.h - cupool's options: one table, every option CUPOOL_*, parsed once
 * and strictly. A bad value yields one line naming the variable, the value
 * and the accepted forms, and the option keeps its default.
 *
 * Knows nothing of CUDA, so the tests drive it with a fake environment.
 */
#ifndef CUPOOL_SHIM_CONFIG_H
#define CUPOOL_SHIM_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "pool.h"

#define SHIM_MAX_DEVICES 64
#define SHIM_SHARDS_MAX 64
#define SHIM_PATH_MAX 512

typedef enum shim_fence_mode {
    SHIM_FENCE_BARRIER, SHIM_FENCE_SYNC, SHIM_FENCE_NONE, SHIM_FENCE_POLL
} shim_fence_mode;

/* An option that is off, on, or decided by what the program does:
 * CUPOOL_CUPTI (auto: once fences come often after the program's first NCCL
 * call, cupti.h), CUPOOL_STITCH (auto: when PyTorch's caching allocator is
 * off, so that cupool serves every tensor; shim_stitch_wanted). */
typedef enum shim_switch {
    SHIM_OFF, SHIM_ON, SHIM_AUTO
} shim_switch;

/* A cap: none, a byte count, or a percentage of the device's memory. */
typedef struct shim_cap {
    uint64_t bytes;     /* when percent == 0; 0 = no cap */
    unsigned percent;   /* 1..100, or 0 */
} shim_cap;

typedef struct shim_config {
    bool disable;
    shim_cap max_reserved;
    shim_cap max_reserved_dev[SHIM_MAX_DEVICES];
    bool has_dev_cap[SHIM_MAX_DEVICES];
    uint64_t release_threshold;     /* UINT64_MAX = keep everything */
    shim_fence_mode fence;
    int flush_signal;               /* 0 = none */
    int stats_signal;               /* 0 = none */
    char stats_file[SHIM_PATH_MAX]; /* "" = stderr; %p = pid */
    char trace[SHIM_PATH_MAX];      /* "" = no trace; %p = pid */
    size_t trace_max;               /* bytes a trace may take; 0 = no limit */
    char page_dir[SHIM_PATH_MAX];   /* checked here; the pages are made
                                       where stats_page_dir() says, which
                                       reads the same variable for the
                                       shim and for cupool stat alike */
    bool stats_json;                /* CUPOOL_STATS_FORMAT=json */
    bool stats_at_exit;
    bool live_page;
    char group[SHIM_PATH_MAX];      /* CUPOOL_GROUP; "" = none */
    shim_cap group_max;             /* the group's budget per device */
    shim_cap group_max_dev[SHIM_MAX_DEVICES];
    bool has_group_dev[SHIM_MAX_DEVICES];
    uint64_t group_wait_ms;         /* CUPOOL_GROUP_WAIT */
    uint64_t pause_call_wait_ms;    /* CUPOOL_PAUSE_CALL_WAIT */
    bool framework_flush;           /* a flush releases the frameworks'
                                       caches first (framework.h) */
    size_t shards;                  /* pools per device, 1..SHIM_SHARDS_MAX */
    bool vmm;                       /* segments from the driver's virtual
                                       memory calls, trimmable */
    shim_switch stitch;             /* and stitching (turns vmm on) */
    size_t vmm_unit;                /* VMM pieces; 0 = by the mode */
    shim_switch cupti;              /* skip fences when CUPTI saw no GPU
                                       work since the last one */
    char cupti_lib[SHIM_PATH_MAX];  /* "" = search for libcupti */
    shim_log_level log;
    pool_config pool;               /* thresholds; max_reserved and
                                       release_threshold filled per device */
} shim_config;

/* Looks up a variable (getenv in the shim, a table in the tests). */
typedef const char *(*shim_getenv_fn)(const char *name);

/* The program's environment as the options read it: the variable, except
 * under secure execution (a setuid or setgid program, or one with file
 * capabilities, into which the library was linked or put by
 * /etc/ld.so.preload): there the environment is another user's, and every
 * option keeps its default (NULL). */
const char *shim_env(const char *name);
/* Receives one complete warning line, without "cupool: " and newline. */
typedef void (*shim_warn_fn)(const char *line);

/* Fills *c from the environment. Every invalid value is reported through
 * warn and replaced by its default. Returns the number of invalid values. */
int shim_config_load(shim_config *c, shim_getenv_fn get, shim_warn_fn warn);

/* Warns (through warn) about every CUPOOL_* variable of env that is no
 * option, naming the nearest option's name where one is near. Returns
 * their number. */
int shim_config_unknown(char *const *env, shim_warn_fn warn);

/* CUPOOL_LOG's level alone (its default where unset or invalid), so that
 * the warnings of shim_config_load can be shown at once. */
shim_log_level shim_config_log_level(shim_getenv_fn get);

/* The cap for a device with total bytes of memory: 0 = none. */
uint64_t shim_cap_bytes(const shim_cap *cap, uint64_t total);

/* Parsers, exposed for the tests. Each returns 0 or -EINVAL. */
/* Whether the program's devices stitch (CUPOOL_STITCH): on, or auto while
 * PyTorch's caching allocator is off. Asked at each device's first pool,
 * not at load: a Python program may turn PyTorch's cache off (in
 * os.environ) after cupool loaded, and PyTorch reads it at its first
 * allocation too. */
bool shim_stitch_wanted(const shim_config *c, shim_getenv_fn get);

int shim_parse_cap(const char *s, shim_cap *out);
int shim_parse_bool(const char *s, bool *out);
int shim_parse_signal(const char *s, int *out);
/* A duration: digits, then nothing (seconds), ms, s, m or h; into *ms. */
int shim_parse_duration(const char *s, uint64_t *ms);

/* Expands %p in pattern to pid into out (len bytes). Returns 0, or -1 if
 * the result does not fit. */
int shim_path_expand(const char *pattern, int pid, char *out, size_t len);

/* Writes the option table (name, default, meaning) to fd, one per line. */
void shim_config_describe(int fd);

/* 1 if name is an on/off option (name=1 turns it on), 0 if it takes a
 * value, -1 if it is no option. */
int shim_option_is_flag(const char *name);

#endif
