/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ipc.c - IPC of pooled blocks between two processes.
 */
#include "prog.h"

/* Device memory seen from the host: the simulated device's is host memory. */
void dev_fill(void *p, int v, size_t n)
{
#ifdef SIMCUDA
    memset(p, v, n);
#else
    OK(cudaMemset(p, v, n));
    OK(cudaDeviceSynchronize());
#endif
}

unsigned char dev_byte(const void *p)
{
    unsigned char b;
#ifdef SIMCUDA
    memcpy(&b, p, 1);
#else
    OK(cudaMemcpy(&b, p, 1, cudaMemcpyDeviceToHost));
#endif
    return b;
}

int prog_argc;
char **prog_argv;

int hold_ticks(int seconds)
{
    return (prog_argc > 2 ? atoi(prog_argv[2]) : seconds) * 100;
}

static void hex(const cudaIpcMemHandle_t *h, char *out)
{
    for (size_t i = 0; i < sizeof(h->reserved); i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)h->reserved[i]);
}

static void unhex(const char *in, cudaIpcMemHandle_t *h)
{
    for (size_t i = 0; i < sizeof(h->reserved); i++) {
        unsigned v = 0;
        sscanf(in + 2 * i, "%2x", &v);
        h->reserved[i] = (char)v;
    }
}

/* Runs rt_prog ipc_import MODE HANDLE_A HANDLE_B in a new process (its
 * environment plus extra, if not NULL); returns its exit status. */
int importer(const char *mode, const cudaIpcMemHandle_t *ha,
                    const cudaIpcMemHandle_t *hb, char *extra)
{
    extern char **environ;
    char a[160], b[160], *env[512];
    hex(ha, a);
    hex(hb, b);
    int n = 0;
    for (char **e = environ; *e && n < 510; e++)
        env[n++] = *e;
    if (extra)
        env[n++] = extra;
    env[n] = NULL;
    char *argv[] = {prog_argv[0], "ipc_import", (char *)mode, a, b, NULL};
    pid_t pid;
    CHECK(posix_spawn(&pid, prog_argv[0], NULL, NULL, argv, env) == 0);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Whether blocks live in VMM segments (CUPOOL_VMM or CUPOOL_STITCH),
 * which have no CUDA handle: every handle is cupool's. */
static bool vmm_blocks(void)
{
    const char *v = getenv("CUPOOL_VMM"), *st = getenv("CUPOOL_STITCH");
    return (v && *v == '1') || (st && *st == '1');
}

/* IPC of pooled blocks. a starts a fresh segment, b lies inside it. Another
 * process opens both handles, finds the bytes written here, opens b twice,
 * writes new bytes, closes everything and opens again; back here, its
 * bytes are in the blocks. An importer without cupool opens a's handle
 * (CUDA's own) and is refused b's (cupool's); so is a forged cupool handle:
 * never a wrong address. In VMM segments both handles are cupool's: the
 * importer without cupool is refused both. */
static int ipc(void)
{
    char *a, *b;
    OK(cudaMalloc((void **)&a, 4096)); /* starts a fresh segment */
    OK(cudaMalloc((void **)&b, 4096)); /* inside it */
    dev_fill(a, 0x11, 4096);
    dev_fill(b, 0x22, 4096);
    cudaIpcMemHandle_t ha, hb;
    OK(cudaIpcGetMemHandle(&ha, a));
    OK(cudaIpcGetMemHandle(&hb, b));
    CHECK(memcmp(&ha, &hb, sizeof(ha)) != 0);
    CHECK(importer("cupool", &ha, &hb, NULL) == 0);
    CHECK(dev_byte(a) == 0x44 && dev_byte(a + 4095) == 0x44);
    CHECK(dev_byte(b) == 0x33 && dev_byte(b + 4095) == 0x33);
    CHECK(importer("plain", &ha, &hb, "CUPOOL_DISABLE=1") == 0);
    /* Exported again, the same block has the same handle (as CUDA's). */
    cudaIpcMemHandle_t again;
    OK(cudaIpcGetMemHandle(&again, b));
    CHECK(memcmp(&again, &hb, sizeof(hb)) == 0);
    /* A handle whose nonce is not the slot's is refused. */
    hb.reserved[16] ^= 0x5a;
    CHECK(importer("forged", &ha, &hb, NULL) == 0);
    printf("ipc ok: blocks shared at their offsets, closed, opened again\n");
    OK(cudaFree(b));
    /* In VMM segments the exporter hands over only a block still live, and
     * only the allocation exported: not a new block at the same place. */
    hb.reserved[16] ^= 0x5a;
    CHECK(!vmm_blocks() || importer("forged", &ha, &hb, NULL) == 0);
    char *b2;
    OK(cudaDeviceSynchronize()); /* b's old work done: its place is free */
    OK(cudaMalloc((void **)&b2, 4096));
    cudaIpcMemHandle_t hb2;
    OK(cudaIpcGetMemHandle(&hb2, b2));
    bool same_handle = !memcmp(&hb2, &hb, sizeof(hb));
    printf("again: same place %d, same handle %d\n", b2 == b, same_handle);
    CHECK(!vmm_blocks() || !same_handle);
    CHECK(!vmm_blocks() || importer("forged", &ha, &hb, NULL) == 0);
    OK(cudaFree(b2));
    OK(cudaFree(a));
    return 0;
}

static int ipc_import(void)
{
    CHECK(prog_argc == 5);
    const char *mode = prog_argv[2];
    cudaIpcMemHandle_t ha, hb;
    unhex(prog_argv[3], &ha);
    unhex(prog_argv[4], &hb);
    char *a, *b, *b2;
    unsigned fl = cudaIpcMemLazyEnablePeerAccess;
    if (!strcmp(mode, "plain") && vmm_blocks()) {
        CHECK(cudaIpcOpenMemHandle((void **)&a, ha, fl) != cudaSuccess);
        CHECK(cudaIpcOpenMemHandle((void **)&b, hb, fl) != cudaSuccess);
        return 0;
    }
    if (!strcmp(mode, "stitched"))
        return ipc_import_stitched(&ha, &hb);
    if (!strcmp(mode, "large"))
        return ipc_import_large(&ha);
    if (!strcmp(mode, "plain")) {
        OK(cudaIpcOpenMemHandle((void **)&a, ha, fl));
        CHECK(dev_byte(a) == 0x44);
        CHECK(cudaIpcOpenMemHandle((void **)&b, hb, fl) != cudaSuccess);
        OK(cudaIpcCloseMemHandle(a));
        return 0;
    }
    if (!strcmp(mode, "forged")) {
        CHECK(cudaIpcOpenMemHandle((void **)&b, hb, fl) == cudaErrorInvalidValue);
        return 0;
    }
    OK(cudaIpcOpenMemHandle((void **)&a, ha, fl));
    OK(cudaIpcOpenMemHandle((void **)&b, hb, fl));
    OK(cudaIpcOpenMemHandle((void **)&b2, hb, fl));
    CHECK(b2 == b && b != a);
    CHECK(dev_byte(a) == 0x11 && dev_byte(a + 4095) == 0x11);
    CHECK(dev_byte(b) == 0x22 && dev_byte(b + 4095) == 0x22);
    dev_fill(b, 0x33, 4096);
    OK(cudaIpcCloseMemHandle(b2));
    CHECK(dev_byte(b) == 0x33); /* still mapped: one user left */
    OK(cudaIpcCloseMemHandle(b));
    OK(cudaIpcCloseMemHandle(a));
    OK(cudaIpcOpenMemHandle((void **)&a, ha, fl));
    dev_fill(a, 0x44, 4096);
    OK(cudaIpcCloseMemHandle(a));
    return 0;
}

const prog_scenario prog_ipc_scenarios[] = {
    {"ipc", ipc},
    {"ipc_import", ipc_import},
    {NULL, NULL},
};
