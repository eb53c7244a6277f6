/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simcuda_internal.h - what the simulated driver's files share: the state
 * (simcuda.c), the CUPTI report (simcupti.c). Hidden: none of it is the
 * library's interface.
 */
#ifndef CUPOOL_SIMCUDA_INTERNAL_H
#define CUPOOL_SIMCUDA_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include <cupti_callbacks.h>

#include "simcuda.h"

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

enum { SIM_MAX_DEV = 8 };

extern HIDDEN pthread_mutex_t sim_lock;    /* guards everything below */
extern HIDDEN simcuda_stats sim_st[SIM_MAX_DEV];
extern HIDDEN int sim_ndev;                /* -1 until sim_setup */
extern HIDDEN bool sim_work_pending[SIM_MAX_DEV]; /* recorded since the last sync */

/* Reads SIMCUDA_DEVICES and SIMCUDA_CAPACITY once. Needs sim_lock. */
HIDDEN void sim_setup(void);

/* Reports a driver call (entry, then return) to CUPTI's subscriber, if
 * it subscribed to it. */
HIDDEN void sim_drv_call(CUpti_CallbackId id);
/* The same, with the call's parameters (its generated_cuda_meta.h
 * structure; the fields the shim reads are filled). */
HIDDEN void sim_drv_call_params(CUpti_CallbackId id, const void *params);
/* One of the two sites alone: a call whose work comes between them.
 * Whether the subscriber was told. */
HIDDEN bool sim_drv_site(CUpti_CallbackId id, const void *params, CUpti_ApiCallbackSite site);

/* A device synchronize's entry or return (cuCtxSynchronize), reported as
 * sim_drv_site does; under SIMCUDA_CUPTI_STRADDLE=1 the first one reported
 * entering after the domain was turned on waits until its callback is
 * turned off (simcupti.c). */
HIDDEN void sim_sync_site(CUpti_ApiCallbackSite site);

/* Whether the test asks call what to fail now (SIMCUDA_FAIL_FILE holds
 * the word: simcopy.c). */
HIDDEN bool sim_fails(const char *what);
/* The same where the file may say "what:N": the calls after N counted in
 * *count (since the word appeared) fail. */
HIDDEN bool sim_fails_after(const char *what, unsigned *count);
/* A call that stays inside the driver for seconds: SIMCUDA_FAIL_FILE.inside
 * is written first, for the test to know. */
HIDDEN void sim_slow_call(unsigned seconds);

/* simckpt.c: marks this process as watched by CUPTI (a subscriber) or
 * not; the driver's lock refuses a watched process, as the real one does
 * (CUDA_ERROR_NOT_SUPPORTED, H200, driver 580). */
HIDDEN void sim_ckpt_cupti_mark(bool watched);

#endif
