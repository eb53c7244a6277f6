/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-cli.c - the export list, `cupool run`, every command's help and mistakes,
 * the README's commands, make demo and make install, start-up refusals, bad
 * options and CUPOOL_DISABLE.
 */
#include "harness.h"

/* `cupool run`: its options become the program's environment, beside the
 * preload; bad use exits 2 with a message. */
static void test_cupool_run(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char out[16384], cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run --cupti "
             "--vmm --fence sync --max-reserved 2G -- sh -c 'echo \"$CUPOOL_CUPTI "
             "$CUPOOL_VMM $CUPOOL_FENCE $CUPOOL_MAX_RESERVED $LD_PRELOAD\"' 2>/dev/null",
             dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "1 1 sync 2G /"));
    assert_non_null(strstr(out, "/libcupool.so"));
    /* Any option of the table, by the one rule: no list to keep. */
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run --vmm-unit 16M "
             "--fence-slack 10 --stats-at-exit --page-dir /tmp -- sh -c 'echo \"$CUPOOL_VMM_UNIT "
             "$CUPOOL_FENCE_SLACK $CUPOOL_STATS_AT_EXIT $CUPOOL_PAGE_DIR\"' 2>/dev/null", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "16M 10 1 /tmp\n");
    assert_int_equal(shell("scripts/cupool options", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "CUPOOL_VMM_UNIT"));
    assert_int_equal(shell("scripts/cupool run --bogus -- true 2>&1", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "run: unknown option '--bogus'"));
    assert_int_equal(shell("scripts/cupool run --cupti 2>&1", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "run: no program given"));
    /* Every option is checked before anything starts: one line, exit 2. */
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run "
             "--max-reserved 12Q -- sh -c 'echo started' 2>&1", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 2);
    assert_string_equal(out, "cupool: run: CUPOOL_MAX_RESERVED=12Q is invalid (expected "
                        "none, a size such as 20G or 512MiB, or a percentage of device "
                        "memory such as 50%)\n");
    /* A value holding the words the shim's own advice starts with is
     * said whole (it was cut at them). */
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run "
             "--max-reserved '1; using 2' -- sh -c 'echo started' 2>&1", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "CUPOOL_MAX_RESERVED=1; using 2 is invalid (expected "));
    snprintf(cmd, sizeof(cmd), "CUPOOL_SMALL_SEGMENT=2G CUPOOL_LIB=%s/libcupool.so "
             "scripts/cupool run true 2>&1", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "CUPOOL_SMALL_SEGMENT is above 1 GiB"));
    assert_int_equal(shell("scripts/cupool run --max-reserved 2>&1", out, sizeof(out)), 2);
    assert_string_equal(out, "cupool: run: --max-reserved needs a value (see 'cupool --help')\n");
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run --log warn "
             "echo no-dashes 2>&1", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "no-dashes\n");
    /* A program on the driver only is reached: no warning. A statically
     * linked one cannot be: one line says so. */
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run --jax -- "
             "%s/rt/drv_prog versions 2>&1", dir, dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "versions ok\n");
    snprintf(cmd, sizeof(cmd), "printf 'int main(void){return 0;}' | cc -static -x c - "
             "-o %s/static_prog && CUPOOL_LIB=%s/libcupool.so scripts/cupool run -- "
             "%s/static_prog 2>&1", dir, dir, dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "is linked statically (no dynamic loader), so LD_PRELOAD "
                                "cannot reach it"));
}

/* Each command has its own help (exit 0); a usage mistake is one line
 * naming it, prefixed "cupool:", exit 2. */
static void test_cli_help_and_mistakes(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    static const char *const cmds[] = {"run", "stat", "top", "flush", "dump", "replay",
                                       "plot", "import-torch", "pause", "resume", "job"};
    char cmd[256], out[4096];
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        snprintf(cmd, sizeof(cmd), "scripts/cupool %s --help 2>&1", cmds[i]);
        int st = shell(cmd, out, sizeof(out));
        char want[64];
        snprintf(want, sizeof(want), "cupool %s", cmds[i]);
        bool global = strstr(out, "cupool top [--interval") && strcmp(cmds[i], "top");
        if (st != 0 || !strstr(out, want) || global)
            fail_msg("'%s --help' exited %d: %.200s", cmds[i], st, out);
    }
    static const struct { const char *args, *line; } bad[] = {
        {"", "cupool: no command given (see 'cupool --help')\n"},
        {"replay x --trim", "cupool: --trim needs a value (see 'cupool --help')\n"},
        {"frobnicate", "cupool: unknown command 'frobnicate' (see 'cupool --help')\n"},
        {"options x", "cupool: options takes no arguments (see 'cupool options --help')\n"},
        {"stat abc", "cupool: 'abc' is not a process id\n"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(cmd, sizeof(cmd), "scripts/cupool %s 2>&1", bad[i].args);
        int st = shell(cmd, out, sizeof(out));
        if (st != 2 || strcmp(out, bad[i].line))
            fail_msg("'cupool %s' exited %d: %s", bad[i].args, st, out);
    }
    /* A program that is not there: 127, as a shell says. */
    assert_int_equal(shell("scripts/cupool run -- cupool-no-such-program 2>&1", out,
                           sizeof(out)), 127);
    assert_non_null(strstr(out, "command not found"));
    assert_int_equal(shell("scripts/cupool --version", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "cupool 0."));
    /* Nothing to show: the table's stdout stays empty, the word goes to
     * stderr. */
    char empty[96], stat_cmd[256];
    assert_non_null(mkdtemp(scratch_path(empty, sizeof(empty), "cupool-empty-pages-XXXXXX")));
    snprintf(stat_cmd, sizeof(stat_cmd),
             "CUPOOL_PAGE_DIR=%s scripts/cupool stat 2>/dev/null; echo rc=$?", empty);
    int st = shell(stat_cmd, out, sizeof(out));
    assert_int_equal(remove_tree(empty), 0);
    assert_int_equal(st, 0);
    assert_string_equal(out, "rc=0\n");
}

/* Every cupool command the README's examples use exists (its --help
 * exits 0), and every option they give it is one the command takes: the
 * examples cannot go stale silently, those marked not run (sudo, a GPU)
 * too. test/test_docs_examples.py runs the others and compares their
 * output. */
static void test_readme_examples_are_commands(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char out[8192];
    int st = shell("python3 - <<'PY'\n"
        "import re, subprocess\n"
        "text = open('README.md').read()\n"
        "blocks = re.findall(r'```sh\\n(.*?)```', text, re.S)\n"
        "bad, n = [], 0\n"
        "for line in (l for b in blocks for l in b.splitlines()):\n"
        "    for cmd in line.split('#')[0].split(';'):\n"
        "        w = cmd.split()\n"
        "        if len(w) < 2 or w[0] != 'scripts/cupool': continue\n"
        "        n += 1\n"
        "        h = subprocess.run(['scripts/cupool', w[1], '--help'], capture_output=True, text=True)\n"
        "        if h.returncode: bad.append(cmd.strip() + ': no such command'); continue\n"
        "        for o in (x for x in w[2:] if x.startswith('--') and x != '--'):\n"
        "            name = o.split('=')[0]\n"
        "            if w[1] == 'run':\n"
        "                k = subprocess.run(['build/cupool-options', 'kind', 'CUPOOL_' + name[2:].upper().replace('-', '_')], capture_output=True)\n"
        "                if k.returncode: bad.append(cmd.strip() + ': ' + name)\n"
        "            elif name not in h.stdout + h.stderr: bad.append(cmd.strip() + ': ' + name)\n"
        "print(n, 'commands;', bad or 'all real')\n"
        "PY", out, sizeof(out));
    print_message("README examples: %s", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "all real"));
}

/* make demo's tour runs to the end and tells its story: the cap's report,
 * the live table, a flush without a signal, a replay and a plot. */
static void test_demo(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    static char out[16384];
    assert_int_equal(shell("scripts/demo 2>&1", out, sizeof(out)), 0);
    static const char *const want[] = {
        "1. The same program, without and with cupool:",
        "cause: the cap: allocated memory plus this request exceeds CUPOOL_MAX_RESERVED",
        " ALLOC RESERV CACHED", "returned 256.00 MiB (268435456 bytes) to the driver",
        "build/demo/timeline.svg: device 0", "docs/BENCHMARKS.md"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(out, want[i]))
            fail_msg("the demo did not say '%s':\n%s", want[i], out);
    assert_null(strstr(out, "18446744073709551615"));
}

/* make install puts cupool on the PATH and what it runs beside it; the
 * installed cupool works; make uninstall removes exactly that. */
static void test_install_uninstall(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    char dirn[96], cmd[768], out[4096];
    assert_non_null(mkdtemp(scratch_path(dirn, sizeof(dirn), "cupool-inst-XXXXXX")));
    snprintf(cmd, sizeof(cmd), "M='env -u MAKEFLAGS -u MAKELEVEL make -s'; $M install DESTDIR=%s PREFIX=/opt/c >/dev/null && "
             "%s/opt/c/bin/cupool replay test/data/train.trace.gz --policy best | head -1 && "
             "$M uninstall DESTDIR=%s PREFIX=/opt/c && find %s -type f | wc -l",
             dirn, dirn, dirn, dirn);
    int st = shell(cmd, out, sizeof(out));
    assert_int_equal(remove_tree(dirn), 0);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "test/data/train.trace.gz: 3818 records"));
    assert_non_null(strstr(out, "\n0\n"));
}

/* What cannot work is said at start-up, in one line each: a cap below one
 * segment, a segment above 1 GiB, a statistics file that is a device or a
 * link (the link's target is left alone). */
static void test_startup_refusals(void **s)
{
    (void)s;
    result *r = run("zero", "CUPOOL_MAX_RESERVED=1K", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_MAX_RESERVED=1024 bytes is below one "
                                   "small segment"));
    r = run("zero", "CUPOOL_LARGE_ROUND=4G", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_LARGE_ROUND is above 1 GiB"));
    r = run("zero", "CUPOOL_STATS_FILE=/dev/full", "CUPOOL_STATS_AT_EXIT=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_STATS_FILE=/dev/full cannot be used: "
                                   "it is not a regular file"));
    assert_non_null(strstr(r->err, "cupool statistics, pid")); /* on stderr instead */
    link_refused("CUPOOL_STATS_FILE", "zero", "CUPOOL_STATS_AT_EXIT=1",
                 "it is a symbolic link; statistics go to stderr");
}

static void test_bad_config_keeps_default(void **s)
{
    (void)s;
    result *r = run("pairs", "CUPOOL_FENCE=bogus", "CUPOOL_MAX_RESERVED=lots", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_FENCE=bogus is invalid "
                                   "(expected barrier, poll, sync or none); using poll\n"));
    assert_non_null(strstr(r->err, "cupool: CUPOOL_MAX_RESERVED=lots is invalid"));
}

static void test_disable_passes_through(void **s)
{
    (void)s;
    /* With the pool off, every pair reaches the driver: the scenario's own
     * check (a handful of driver calls) must fail. */
    result *r = run_expecting(1, "pairs", "CUPOOL_DISABLE=1", NULL);
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->out, "driver mallocs for 10000 pairs: 10000"));
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_exports_match_allowlist(void **s)
{
    (void)s;
    const char *want[] = {
#define X_NAME(ret, name, params) #name,
        SHIM_INTERPOSED(X_NAME)
        SHIM_OPTIONAL(X_NAME)
#undef X_NAME
#define X_SIG(name) #name,
        SHIM_SIGNAL_EXPORTS(X_SIG)
#undef X_SIG
#define X_DRV(name, params) #name,
        SHIM_DRV_SERVED(X_DRV)
#undef X_DRV
#define X_NCCL(name) #name,
        SHIM_NCCL_EXPORTS(X_NCCL)
        SHIM_CUPTI_EXPORTS(X_NCCL)
#undef X_NCCL
        "dlsym", /* driver.c: answers lookups on the driver */
    };
    size_t nwant = sizeof(want) / sizeof(want[0]);
    qsort(want, nwant, sizeof(want[0]), by_name);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only %s/libcupool.so | "
             "awk '{print $3}' | sort", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[256];
    size_t i = 0;
    while (fgets(line, sizeof(line), p)) {
        line[strcspn(line, "\n")] = '\0';
        if (i >= nwant || strcmp(line, want[i]))
            fail_msg("unexpected export %s", line);
        i++;
    }
    assert_int_equal(pclose(p), 0);
    assert_int_equal(i, nwant);
}

/* ---- every command's help and mistakes, as scripts/cupool runs them ----------- */

/* A copy of scripts/cupool and cupool-import-torch in a new directory
 * (its path into root), beside a link named build to the build under test
 * (READER's folder): the copy runs this build's programs, whatever the
 * build's folder is called. */
static void cli_copy_make(char *root, size_t len)
{
    char built[PATH_MAX], cmd[PATH_MAX + 256], out[256];
    assert_non_null(mkdtemp(scratch_path(root, len, "cupool-cli-XXXXXX")));
    assert_non_null(realpath(READER, built));
    *strrchr(built, '/') = '\0';
    snprintf(cmd, sizeof(cmd), "mkdir %s/scripts && cp scripts/cupool scripts/cupool-import-torch "
             "%s/scripts/ && ln -s '%s' %s/build", root, root, built, root);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
}

/* Every command scripts/cupool dispatches takes -h and --help: its usage
 * on stdout, exit 0. Given an option it does not take, it names it on its
 * first line, "cupool COMMAND: unknown option '--bogus'", then gives its
 * usage, all on stderr, exit 2. */
static void test_cli_every_command_help_and_unknown_option(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    static const char *const cmds[] = {"run", "stat", "top", "flush", "dump", "pause",
                                       "resume", "job", "exporter", "options", "replay", "plot",
                                       "import-torch", "version", "help"};
    static char out[16384];
    char root[96], cmd[512], want[160];
    cli_copy_make(root, sizeof(root));
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        snprintf(want, sizeof(want), "cupool %s", cmds[i]);
        for (int h = 0; h < 2; h++) {
            snprintf(cmd, sizeof(cmd), "%s/scripts/cupool %s %s 2>/dev/null", root, cmds[i],
                     h ? "--help" : "-h");
            int st = shell(cmd, out, sizeof(out));
            if (st != 0 || !strstr(out, want))
                fail_msg("'cupool %s %s' exited %d: %.300s", cmds[i], h ? "--help" : "-h", st,
                         out);
        }
        snprintf(cmd, sizeof(cmd), "%s/scripts/cupool %s --bogus 2>/dev/null", root, cmds[i]);
        int st = shell(cmd, out, sizeof(out));
        if (st != 2 || out[0])
            fail_msg("'cupool %s --bogus' exited %d, its stdout: %.300s", cmds[i], st, out);
        snprintf(cmd, sizeof(cmd), "%s/scripts/cupool %s --bogus 2>&1 >/dev/null", root, cmds[i]);
        shell(cmd, out, sizeof(out));
        snprintf(want, sizeof(want), "cupool %s: unknown option '--bogus'\n", cmds[i]);
        if (strncmp(out, want, strlen(want)) || !strstr(out + strlen(want), "cupool"))
            fail_msg("'cupool %s --bogus' said: %.300s", cmds[i], out);
    }
    assert_int_equal(remove_tree(root), 0);
}

/* cupool pause (and resume) of a process that does not exist says so,
 * and loads no driver first: here the driver found is a library that
 * only leaves a mark when it is loaded. */
static void test_cli_pause_no_process_before_driver(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    int pid = 999999;
    while (kill(pid, 0) == 0 || errno != ESRCH)
        pid++;
    char root[96], cmd[1024], out[4096], want[160];
    cli_copy_make(root, sizeof(root));
    snprintf(cmd, sizeof(cmd), "printf '#include <fcntl.h>\\n#include <stdlib.h>\\n"
             "__attribute__((constructor)) static void loaded(void) "
             "{ creat(getenv(\"MARK\"), 0600); }\\n' | cc -shared -fPIC -x c - "
             "-o %s/libcuda.so.1", root);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof(cmd), "MARK=%s/loaded LD_LIBRARY_PATH=%s %s/scripts/cupool %s %d "
                 "2>&1", root, root, root, k ? "resume" : "pause", pid);
        int st = shell(cmd, out, sizeof(out));
        snprintf(want, sizeof(want), "cupool: no process %d (no such process): nothing done\n",
                 pid);
        snprintf(cmd, sizeof(cmd), "%s/loaded", root);
        if (st != 1 || strcmp(out, want) || access(cmd, F_OK) == 0)
            fail_msg("'cupool %s %d' exited %d, the driver %s: %s", k ? "resume" : "pause", pid,
                     st, access(cmd, F_OK) ? "not loaded" : "loaded", out);
    }
    assert_int_equal(remove_tree(root), 0);
}

const struct CMUnitTest shim_cli_tests[] = {
    cmocka_unit_test(test_exports_match_allowlist),
    cmocka_unit_test(test_cupool_run),
    cmocka_unit_test(test_startup_refusals),
    cmocka_unit_test(test_cli_help_and_mistakes),
    cmocka_unit_test(test_cli_every_command_help_and_unknown_option),
    cmocka_unit_test(test_cli_pause_no_process_before_driver),
    cmocka_unit_test(test_readme_examples_are_commands),
    cmocka_unit_test(test_demo),
    cmocka_unit_test(test_install_uninstall),
    cmocka_unit_test(test_bad_config_keeps_default),
    cmocka_unit_test(test_disable_passes_through),
};
const size_t shim_cli_count = sizeof(shim_cli_tests) / sizeof(shim_cli_tests[0]);
