/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupti_count.c - a preloadable library that counts, through CUPTI's
 * driver-API callbacks, the kernel launches a program makes, and prints
 * "cupti_count launches=N" at exit (stderr).
 *
 * CUPOOL_CUPTI rests on one premise: all GPU work, whoever asks for it
 * (a static or shared runtime, cuBLAS, cuDNN), passes a driver call that
 * CUPTI reports. gpu-check runs programs under this library to check it
 * on the driver at hand: each must show at least the launches it makes.
 */
#include <cupti.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static atomic_ulong launches;

static void CUPTIAPI on_call(void *ud, CUpti_CallbackDomain domain,
                             CUpti_CallbackId id, const void *data)
{
    (void)ud;
    const CUpti_CallbackData *cd = data;
    const char *name = NULL;
    if (cd->callbackSite != CUPTI_API_EXIT ||
        cuptiGetCallbackName(domain, id, &name) != CUPTI_SUCCESS || !name)
        return;
    if (!strncmp(name, "cuLaunch", 8) && strncmp(name, "cuLaunchHostFunc", 16))
        atomic_fetch_add(&launches, 1);
}

__attribute__((constructor)) static void start(void)
{
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_call, NULL) != CUPTI_SUCCESS ||
        cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS)
        fprintf(stderr, "cupti_count: cannot subscribe\n");
}

__attribute__((destructor)) static void stop(void)
{
    fprintf(stderr, "cupti_count launches=%lu\n", atomic_load(&launches));
}
