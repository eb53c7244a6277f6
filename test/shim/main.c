/* SPDX-License-Identifier: Apache-2.0 */
/*
 * main.c - test_shim: runs the test/prog scenarios as child processes
 * with LD_PRELOAD=<build>/libcupool.so over the simulated runtime, each
 * with the environment it needs, and checks exit status and what cupool
 * printed; also the export list, the commands and the trace tools.
 *
 *   test_shim [-g FEATURE[,FEATURE...]] [-l] [DIR [RUNTIME]]
 *
 * DIR is the build variant under test (build, build/asan, build/tsan),
 * RUNTIME the sanitizer runtime to preload ahead of it. -g runs the named
 * features only (each a cmocka group of its own, so that `make test` can
 * spread them over the machine's cores); -l lists every feature and test.
 * TEST_ONLY='glob' runs the tests whose names match.
 */
#include "harness.h"

/* The features, each a test/shim/test-<feature>.c ending with its tests. */
#define SHIM_FEATURES(X)                                                      \
    X(cli) X(fence) X(cupti) X(memory) X(vmm) X(driver) X(stats) X(signals)   \
    X(framework) X(pause) X(job) X(group) X(turn) X(trace)

#define X_DECLARE(f)                                                          \
    extern const struct CMUnitTest shim_##f##_tests[];                        \
    extern const size_t shim_##f##_count;
SHIM_FEATURES(X_DECLARE)
#undef X_DECLARE

static const struct feature {
    const char *name;
    const struct CMUnitTest *tests;
    const size_t *count;
} features[] = {
#define X_ENTRY(f) {#f, shim_##f##_tests, &shim_##f##_count},
    SHIM_FEATURES(X_ENTRY)
#undef X_ENTRY
};
#define NFEATURES (sizeof(features) / sizeof(features[0]))

/* Whether feature name is in the comma-separated list (NULL: all). */
static bool chosen(const char *list, const char *name)
{
    if (!list)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, name, n))
            return true;
        p += len + (p[len] == ',');
    }
    return false;
}

static void list_tests(void)
{
    for (size_t i = 0; i < NFEATURES; i++)
        for (size_t k = 0; k < *features[i].count; k++)
            printf("%s %s\n", features[i].name, features[i].tests[k].name);
}

/* Every name in list is a feature: 0, or -1 after saying which is not. */
static int check_list(const char *list)
{
    for (const char *p = list; list && *p;) {
        size_t len = strcspn(p, ","), i = 0;
        while (i < NFEATURES && !(strlen(features[i].name) == len &&
                                  !strncmp(p, features[i].name, len)))
            i++;
        if (i == NFEATURES) {
            fprintf(stderr, "test_shim: no feature %.*s (-l lists them)\n", (int)len, p);
            return -1;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "g:l")) != -1) {
        if (opt == 'l') {
            list_tests();
            return 0;
        }
        if (opt != 'g')
            return 2;
        only = optarg;
    }
    if (check_list(only))
        return 2;
    if (optind < argc)
        dir = argv[optind];
    if (optind + 1 < argc)
        runtime = argv[optind + 1];
    printf("variant: %s\n", dir);
    if (getenv("TEST_ONLY")) /* a glob of test names, to run a few */
        cmocka_set_test_filter(getenv("TEST_ONLY"));
    struct rlimit nocore = {0, 0}; /* SIGQUIT's default action dumps core */
    setrlimit(RLIMIT_CORE, &nocore);
    scratch_path(run_pages, sizeof(run_pages), "cupool-run-pages-XXXXXX");
    if (!mkdtemp(run_pages))
        return 1;
    int failed = 0;
    for (size_t i = 0; i < NFEATURES; i++)
        if (chosen(only, features[i].name))
            failed += _cmocka_run_group_tests(features[i].name, features[i].tests,
                                              *features[i].count, NULL, NULL);
    return remove_tree(run_pages) ? 1 : failed;
}
