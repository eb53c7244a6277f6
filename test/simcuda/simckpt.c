/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simckpt.c - the driver's checkpoint calls (cuCheckpointProcess*), as
 * cupool pause and resume use them from another process, on the simulated
 * driver. Each process's state lives in a file, SIMCUDA_CKPT_DIR/<pid>
 * (RUNNING when there is none), so that the controller, the process and
 * the tests all see it. A pid with no process is CUDA_ERROR_INVALID_VALUE,
 * as the real driver answers. SIMCUDA_CKPT_FAIL names calls to fail with
 * CUDA_ERROR_UNKNOWN, the state unchanged ("lock,restore": those two;
 * "checkpoint@1234": for process 1234 alone);
 * "checkpoint=failed" also leaves the process FAILED. SIMCUDA_CKPT_LOG, a
 * file, gets one line per call ("lock 1234 -> 0", "state 1234 -> 0").
 * A process CUPTI watches (a subscriber, marked by <pid>.cupti beside its
 * state) is not locked: CUDA_ERROR_NOT_SUPPORTED, as the real driver
 * answers.
 */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <unistd.h>

#include "simcuda_internal.h"

#define EXPORT __attribute__((visibility("default")))

static void state_path(int pid, char *buf, size_t len)
{
    const char *d = getenv("SIMCUDA_CKPT_DIR");
    if (!d) /* the run's scratch directory (scripts/run-tests), else /tmp */
        d = getenv("TMPDIR");
    snprintf(buf, len, "%s/%d", d ? d : "/tmp", pid);
}

static CUprocessState state_of(int pid)
{
    char path[512];
    state_path(pid, path, sizeof(path));
    FILE *f = fopen(path, "r");
    int s = CU_PROCESS_STATE_RUNNING;
    if (f) {
        if (fscanf(f, "%d", &s) != 1)
            s = CU_PROCESS_STATE_RUNNING;
        fclose(f);
    }
    return (CUprocessState)s;
}

static void state_set(int pid, CUprocessState s)
{
    char path[512];
    state_path(pid, path, sizeof(path));
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%d\n", (int)s);
        fclose(f);
    }
}

/* Whether call on pid is to fail; *failed when it also leaves the
 * process FAILED. "call@PID" fails it for that process alone. */
static bool fails(const char *call, int pid, bool *failed)
{
    const char *list = getenv("SIMCUDA_CKPT_FAIL");
    size_t n = strlen(call);
    *failed = false;
    for (const char *p = list; p && (p = strstr(p, call)); p += n) {
        if (p != list && p[-1] != ',')
            continue;
        const char *q = p + n;
        if (*q == '@' && atoi(q + 1) != pid)
            continue;
        if (*q == '@')
            q += strspn(q + 1, "0123456789") + 1;
        if (!*q || *q == ',' || *q == '=') {
            *failed = !strncmp(q, "=failed", 7);
            return true;
        }
    }
    return false;
}

static CUresult logged(const char *call, int pid, CUresult r)
{
    const char *path = getenv("SIMCUDA_CKPT_LOG");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) {
        fprintf(f, "%s %d -> %d\n", call, pid, (int)r);
        fclose(f);
    }
    return r;
}

static void cupti_mark_path(int pid, char *buf, size_t len)
{
    char state[512];
    state_path(pid, state, sizeof(state));
    snprintf(buf, len, "%s.cupti", state);
}

HIDDEN void sim_ckpt_cupti_mark(bool watched)
{
    char path[600];
    cupti_mark_path((int)getpid(), path, sizeof(path));
    if (!watched) {
        unlink(path);
        return;
    }
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
}

static bool cupti_watches(int pid)
{
    char path[600];
    cupti_mark_path(pid, path, sizeof(path));
    return access(path, F_OK) == 0;
}

/* One transition: from must be the state, to is the state after. */
static CUresult step(const char *call, int pid, CUprocessState from, CUprocessState to)
{
    bool failed;
    if (pid <= 0 || kill(pid, 0) != 0)
        return logged(call, pid, CUDA_ERROR_INVALID_VALUE);
    if (state_of(pid) != from)
        return logged(call, pid, CUDA_ERROR_ILLEGAL_STATE);
    if (fails(call, pid, &failed)) {
        if (failed)
            state_set(pid, CU_PROCESS_STATE_FAILED);
        return logged(call, pid, CUDA_ERROR_UNKNOWN);
    }
    state_set(pid, to);
    return logged(call, pid, CUDA_SUCCESS);
}

EXPORT CUresult cuCheckpointProcessGetState(int pid, CUprocessState *state)
{
    if (pid <= 0 || kill(pid, 0) != 0)
        return logged("state", pid, CUDA_ERROR_INVALID_VALUE);
    *state = state_of(pid);
    return logged("state", pid, CUDA_SUCCESS);
}

EXPORT CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *args)
{
    (void)args;
    if (pid > 0 && kill(pid, 0) == 0 && state_of(pid) == CU_PROCESS_STATE_RUNNING &&
        cupti_watches(pid))
        return logged("lock", pid, CUDA_ERROR_NOT_SUPPORTED);
    return step("lock", pid, CU_PROCESS_STATE_RUNNING, CU_PROCESS_STATE_LOCKED);
}

EXPORT CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *args)
{
    (void)args;
    return step("checkpoint", pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_CHECKPOINTED);
}

EXPORT CUresult cuCheckpointProcessRestore(int pid, CUcheckpointRestoreArgs *args)
{
    (void)args;
    return step("restore", pid, CU_PROCESS_STATE_CHECKPOINTED, CU_PROCESS_STATE_LOCKED);
}

EXPORT CUresult cuCheckpointProcessUnlock(int pid, CUcheckpointUnlockArgs *args)
{
    (void)args;
    return step("unlock", pid, CU_PROCESS_STATE_LOCKED, CU_PROCESS_STATE_RUNNING);
}
