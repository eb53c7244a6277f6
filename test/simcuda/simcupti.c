/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simcupti.c - the simulated CUPTI: one subscriber, the driver domain only.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>

#include "simcuda_internal.h"

/* ---- CUPTI, driver domain only -------------------------------------------
 * Every runtime call below that stands for a driver call reports it (entry,
 * then return) to the one subscriber, unless that call was turned off. */
static _Atomic(CUpti_CallbackFunc) cupti_cb; /* the subscriber's, or NULL */
static atomic_bool cupti_off[CUPTI_DRIVER_TRACE_CBID_SIZE];
static atomic_bool cupti_domain_on;

void sim_drv_call(CUpti_CallbackId id)
{
    sim_drv_call_params(id, NULL);
}

bool sim_drv_site(CUpti_CallbackId id, const void *params, CUpti_ApiCallbackSite site)
{
    if (!atomic_load(&cupti_domain_on) || id >= CUPTI_DRIVER_TRACE_CBID_SIZE ||
        atomic_load(&cupti_off[id]))
        return false;
    CUpti_CallbackFunc cb = atomic_load(&cupti_cb);
    if (!cb)
        return false;
    CUpti_CallbackData d = {.callbackSite = site, .functionParams = params};
    cb(NULL, CUPTI_CB_DOMAIN_DRIVER_API, id, &d);
    return true;
}

void sim_drv_call_params(CUpti_CallbackId id, const void *params)
{
    sim_drv_site(id, params, CUPTI_API_ENTER);
    sim_drv_site(id, params, CUPTI_API_EXIT);
}

/* SIMCUDA_CUPTI_STRADDLE=1: a device synchronize spans the turning off of
 * its own callback, as a long one on a real GPU may while a subscriber
 * turns the domain on and then calls off one by one: the first
 * synchronize reported entering waits (up to 2 s) until
 * cuptiEnableCallback(0, cuCtxSynchronize), which waits (up to 2 s) for
 * it, has turned it off; its return is then not reported. */
static atomic_int straddle; /* 0, 1: one entered, 2: its callback off */

static bool straddling(void)
{
    const char *e = getenv("SIMCUDA_CUPTI_STRADDLE");
    return e && *e == '1';
}

static void straddle_wait(int stage)
{
    for (int i = 0; i < 2000 && atomic_load(&straddle) < stage; i++)
        usleep(1000);
}

void sim_sync_site(CUpti_ApiCallbackSite site)
{
    bool reported = sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, NULL, site);
    int none = 0;
    if (site == CUPTI_API_ENTER && reported && straddling() &&
        atomic_compare_exchange_strong(&straddle, &none, 1))
        straddle_wait(2);
}

EXPORT void simcuda_report_call(unsigned cbid)
{
    sim_drv_call((CUpti_CallbackId)cbid);
}

/* SIMCUDA_CUPTI_TAKEN=1: another tool holds CUPTI already. */
EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
                                  void *ud)
{
    (void)ud;
    const char *t = getenv("SIMCUDA_CUPTI_TAKEN");
    CUpti_CallbackFunc none = NULL;
    if ((t && *t == '1') || !atomic_compare_exchange_strong(&cupti_cb, &none, cb))
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    *sub = (CUpti_SubscriberHandle)&cupti_cb;
    sim_ckpt_cupti_mark(true);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle sub)
{
    (void)sub;
    atomic_store(&cupti_domain_on, false);
    atomic_store(&cupti_cb, NULL);
    sim_ckpt_cupti_mark(false);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableDomain(uint32_t on, CUpti_SubscriberHandle sub,
                                     CUpti_CallbackDomain domain)
{
    if (sub != (CUpti_SubscriberHandle)&cupti_cb || domain != CUPTI_CB_DOMAIN_DRIVER_API)
        return CUPTI_ERROR_INVALID_PARAMETER;
    for (int i = 0; i < CUPTI_DRIVER_TRACE_CBID_SIZE; i++)
        atomic_store(&cupti_off[i], !on);
    atomic_store(&cupti_domain_on, on != 0);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t on, CUpti_SubscriberHandle sub,
                                       CUpti_CallbackDomain domain, CUpti_CallbackId id)
{
    if (sub != (CUpti_SubscriberHandle)&cupti_cb || domain != CUPTI_CB_DOMAIN_DRIVER_API ||
        id >= CUPTI_DRIVER_TRACE_CBID_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (!on && id == CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize && straddling() &&
        atomic_load(&cupti_domain_on)) {
        straddle_wait(1);
        atomic_store(&cupti_off[id], true);
        atomic_store(&straddle, 2);
        return CUPTI_SUCCESS;
    }
    atomic_store(&cupti_off[id], !on);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
    *s = r == CUPTI_SUCCESS ? "CUPTI_SUCCESS"
         : r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
             ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" : "CUPTI_ERROR";
    return CUPTI_SUCCESS;
}
