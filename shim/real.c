/*
 * real.c - finds the real CUDA runtime functions, once.
 *
 * dlsym(RTLD_NEXT) finds the runtime the program linked against. When a
 * plugin loaded it with RTLD_LOCAL (Python extensions do), RTLD_NEXT cannot
 * see it, so fall back to the already-loaded libcudart.so.13 or .12
 * (RTLD_NOLOAD: never load a runtime the program did not).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>

#include "log.h"
#include "real.h"

shim_real_table shim_real;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int result;

static void *find(const char *name, void **lib)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f)
        return f;
    static const char *const libs[] = {"libcudart.so.13", "libcudart.so.12"};
    for (int i = 0; !*lib && i < 2; i++)
        *lib = dlopen(libs[i], RTLD_NOW | RTLD_NOLOAD);
    return *lib ? dlsym(*lib, name) : NULL;
}

static void resolve(void)
{
    void *lib = NULL;
    int missing = 0;
#define SHIM_X_FIND(ret, name, params)                                        \
    *(void **)&shim_real.name = find(#name, &lib);                           \
    if (!shim_real.name) {                                                    \
        shim_log(SHIM_LOG_ERROR, "the CUDA runtime's " #name " was not "      \
                 "found; calls that need it pass through or fail");          \
        missing++;                                                            \
    }
    SHIM_INTERPOSED(SHIM_X_FIND)
    SHIM_USED(SHIM_X_FIND)
#undef SHIM_X_FIND
#define SHIM_X_TRY(ret, name, params) *(void **)&shim_real.name = find(#name, &lib);
    SHIM_OPTIONAL(SHIM_X_TRY)
    SHIM_USED_OPTIONAL(SHIM_X_TRY)
#undef SHIM_X_TRY
    result = missing ? -ENOENT : 0;
}

int shim_real_resolve(void)
{
    pthread_once(&once, resolve);
    return result;
}
