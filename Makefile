# SPDX-License-Identifier: Apache-2.0
# cupool - plain GNU make. `make` builds, `make test` runs every test (with
# AddressSanitizer, UndefinedBehaviorSanitizer and ThreadSanitizer builds),
# `make bench` runs the CPU benchmarks.

CC      ?= cc
BUILD   ?= build
PREFIX  ?= /usr/local
CUDA    ?= /usr/local/cuda

WARN    := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
DEFS    := -D_GNU_SOURCE
CFLAGS  ?= -O2 -g
ALL_CFLAGS := $(WARN) $(DEFS) $(CFLAGS)
ASAN    := -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all \
           -fno-omit-frame-pointer
TSAN    := -O1 -g -fsanitize=thread

CUDA_INC := -I$(CUDA)/include

POOL_SRC := pool/pool.c pool/alloc.c pool/fence.c pool/fit.c pool/block.c pool/segment.c pool/trim.c \
            pool/stitch.c pool/bins.c pool/dirty.c pool/tree.c pool/addrmap.c pool/check.c
POOL_HDR := $(wildcard pool/*.h)
TEST_HDR := $(wildcard test/*.h)
SIM_SRC  := trace/sim_backend.c
TEST_INC := -Ipool -Itrace -Itest

# What the library and the tools share below them: the page, its fields and
# formats (stats/), the group segment (group/), the trace's records (trace/
# trace.c) and the careful file opening (common/).
STATS_SRC := stats/format.c stats/page.c common/safefile.c common/text.c common/clock.c group/groupseg.c \
             group/format.c \
             trace/trace.c
STATS_HDR := $(wildcard stats/*.h common/*.h group/*.h) trace/trace.h
STATS_INC := -Ipool -Istats -Icommon -Igroup -Itrace
# The node-wide reading the tools do (node/): every process's page found from
# /proc, user namespaces; the library never links it.
NODE_SRC := node/node.c node/proclabels.c node/userns.c stats/page_node.c
NODE_HDR := $(wildcard node/*.h)
# The programs (tools/) share one argument helper.
TOOLS_INC := $(STATS_INC) -Inode -Itools -Ipause
# The shim, by layer (docs/DESIGN.md): base (options, log, process state,
# recorder), cuda (the real libraries and the seam), watch (NCCL, CUPTI,
# NVML), device (pools, fence, capture, cap, group), entry (what a program
# calls), process (start-up, helper thread, signals, framework flush).
SHIM_DIRS := base cuda watch device entry process
SHIM_SRC := $(foreach d,$(SHIM_DIRS),$(wildcard shim/$(d)/*.c)) $(STATS_SRC)
SHIM_HDR := $(foreach d,$(SHIM_DIRS),$(wildcard shim/$(d)/*.h)) $(STATS_HDR)
SHIM_INC := $(STATS_INC) $(foreach d,$(SHIM_DIRS),-Ishim/$(d)) $(CUDA_INC)

# Unit and property tests of pool/, built with ASan+UBSan.
POOL_TESTS := test_pool test_pool_random test_pool_frag test_addrmap
# Threaded tests, built with TSan.
TSAN_TESTS := test_pool_threads

# NO_EXPORTER=1 builds everything but the exporter, and needs no
# libmicrohttpd: for a machine that cannot install it (a GPU host without a
# network; scripts/gpu-check sets it there).
EXPORTER_BIN := $(if $(NO_EXPORTER),,$(BUILD)/cupool-exporter)

.PHONY: all test bench demo deps cmocka-check clean install uninstall
all: deps $(BUILD)/libcupool.so $(BUILD)/cupool-stat $(EXPORTER_BIN) $(BUILD)/cupool-trace \
     $(BUILD)/cupool-options $(BUILD)/cupool-pause $(BUILD)/libcupool_pool.a

# The build's dependencies, each missing one installed at once (root with
# apt-get: scripts/install-deps) or named in the one command that does.
deps:
	@test -f $(CUDA)/include/cuda_runtime_api.h || { echo "cupool needs the CUDA \
	toolkit's headers at $(CUDA)/include (install the CUDA toolkit, or run make \
	CUDA=/path/to/cuda)"; exit 1; }
	@missing=; \
	command -v $(CC) >/dev/null || missing="$$missing gcc"; \
	test -f /usr/include/zlib.h || missing="$$missing zlib1g-dev"; \
	test -n "$(NO_EXPORTER)" || test -f /usr/include/microhttpd.h || \
	    missing="$$missing libmicrohttpd-dev"; \
	scripts/install-deps "the build" $$missing

# The tests' own tools: cmocka; Python 3 (a real JSON parser reads the
# statistics); xmllint (the SVG timeline), installed as the build's are; and
# promtool (it checks the Prometheus output and the alert rules) and the
# prometheus binary (the exporter's test scrapes through it), taken out of
# Debian's prometheus package into $(BUILD)/tools without installing the
# package, which would enable a Prometheus server (scripts/get-promtool);
# PyYAML (the recipes' YAML is parsed); Slurm's daemons and munge
# (test/test_slurm.py starts a one-node Slurm), installed where root has
# apt-get, else that test says it skipped; kubernetes-models, the
# Kubernetes API's schema for deploy/kubernetes/, from the npm registry into
# $(BUILD)/tools/kube (scripts/get-kube-models; without node and npm, or
# offline, test/test_kube_schema.py says it skipped).
cmocka-check:
	@missing=; \
	test -f /usr/include/cmocka.h || missing="$$missing libcmocka-dev"; \
	command -v python3 >/dev/null || missing="$$missing python3"; \
	command -v xmllint >/dev/null || missing="$$missing libxml2-utils"; \
	python3 -c 'import yaml' 2>/dev/null || /usr/bin/python3 -c 'import yaml' 2>/dev/null || \
	    missing="$$missing python3-yaml"; \
	scripts/install-deps "the tests" $$missing
	@missing=; \
	for t in slurmctld:slurmctld slurmd:slurmd munged:munge; do \
	    command -v $${t%%:*} >/dev/null || missing="$$missing $${t#*:}"; \
	done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    scripts/install-deps "test/test_slurm.py" $$missing || true; fi
	@scripts/get-promtool $(BUILD)/tools
	@scripts/get-kube-models $(BUILD)/tools/kube || true

# The preloadable library: not linked against any CUDA runtime (it finds the
# program's own at run time), exporting only the interposed symbols.
define shim_so
$(1)/libcupool.so: $(SHIM_SRC) $(POOL_SRC) $(SHIM_HDR) $(POOL_HDR)
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) -fPIC -shared -fvisibility=hidden $$(SHIM_INC) \
	    $$(SHIM_SRC) $$(POOL_SRC) -ldl -lpthread -o $$@
endef

# The simulated driver (libcuda.so.1, holding the state), the simulated
# runtime on it (libcudart.so.13 with the real version node), the scenario
# program linked against the runtime, and the driver-API program linked
# only against the driver (as a static runtime, CuPy or XLA reach it).
# rt_prog's scenarios: one file per feature, main.c finding one by name.
PROG_SRC := $(wildcard test/prog/*.c)
SIMCUDA_SRC := test/simcuda/simcuda.c test/simcuda/simcupti.c test/simcuda/simvmm.c test/simcuda/simckpt.c \
               test/simcuda/simcopy.c
define shim_rt
$(1)/sim/libcuda.so.1: $(SIMCUDA_SRC) test/simcuda/simcuda.h test/simcuda/simcuda_internal.h
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) -fPIC -shared $$(CUDA_INC) -Wl,-soname,libcuda.so.1 $(SIMCUDA_SRC) \
	    -ldl -lpthread -o $$@
$(1)/sim/libcudart.so.13: test/simcuda/simcudart.c test/simcuda/libcudart.map $(1)/sim/libcuda.so.1
	$$(CC) $(2) -fPIC -shared $$(CUDA_INC) -Wl,-soname,libcudart.so.13 \
	    -Wl,--version-script=test/simcuda/libcudart.map $$< \
	    -L$(1)/sim -l:libcuda.so.1 -Wl,-rpath,$$(abspath $(1)/sim) -ldl -lpthread -o $$@
$(1)/sim/libnccl.so.2: test/simcuda/simnccl.c $(1)/sim/libcudart.so.13
	$$(CC) $(2) -fPIC -shared $$(CUDA_INC) -Wl,-soname,libnccl.so.2 $$< \
	    -L$(1)/sim -l:libcudart.so.13 -l:libcuda.so.1 -Wl,-rpath,$$(abspath $(1)/sim) -o $$@
$(1)/sim/libnccl-nosuspend.so: test/simcuda/simnccl.c $(1)/sim/libcudart.so.13
	$$(CC) $(2) -DSIMNCCL_NO_SUSPEND -fPIC -shared $$(CUDA_INC) -Wl,-soname,libnccl.so.2 $$< \
	    -L$(1)/sim -l:libcudart.so.13 -l:libcuda.so.1 -Wl,-rpath,$$(abspath $(1)/sim) -o $$@
$(1)/rt/rt_prog: $(PROG_SRC) test/prog/prog.h $(1)/sim/libcudart.so.13 $(1)/sim/libnccl.so.2 \
                 $(1)/sim/libnccl-nosuspend.so
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) -DSIMCUDA $$(CUDA_INC) -Itest/simcuda $(PROG_SRC) \
	    -L$(1)/sim -l:libcudart.so.13 -l:libcuda.so.1 -Wl,-rpath,$$(abspath $(1)/sim) \
	    -ldl -lpthread -o $$@
$(1)/rt/pause_prog: test/pause_prog.c $(1)/sim/libcudart.so.13
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) $$(CUDA_INC) $$< -L$(1)/sim -l:libcudart.so.13 -l:libcuda.so.1 \
	    -Wl,-rpath,$$(abspath $(1)/sim) -lpthread -o $$@
$(1)/rt/libfailmalloc.so: test/failmalloc.c
	@mkdir -p $$(dir $$@)
	$$(CC) -O2 -fPIC -shared $$< -o $$@
$(1)/rt/libnext.so: test/next_interposer.c
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) -fPIC -shared $$< -ldl -o $$@
$(1)/rt/evil_page: test/evil_page.c $$(STATS_SRC) $$(STATS_HDR)
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) -Ipool -Istats -Icommon -Igroup -Itrace $$< $$(STATS_SRC) -lpthread -o $$@
$(1)/rt/drv_prog: test/drv_prog.c $(1)/sim/libcuda.so.1
	@mkdir -p $$(dir $$@)
	$$(CC) $(2) $$(CUDA_INC) -Itest/simcuda $$< \
	    -L$(1)/sim -l:libcuda.so.1 -Wl,-rpath,$$(abspath $(1)/sim) -ldl -lpthread -o $$@
endef

$(eval $(call shim_so,$(BUILD),$(ALL_CFLAGS)))
$(eval $(call shim_so,$(BUILD)/asan,$(WARN) $(DEFS) $(ASAN)))
$(eval $(call shim_so,$(BUILD)/tsan,$(WARN) $(DEFS) $(TSAN)))
$(eval $(call shim_rt,$(BUILD),$(ALL_CFLAGS)))
$(eval $(call shim_rt,$(BUILD)/asan,$(WARN) $(DEFS) $(ASAN)))
$(eval $(call shim_rt,$(BUILD)/tsan,$(WARN) $(DEFS) $(TSAN)))

# The programs behind `cupool` (tools/, pause/main.c): each its own source
# list; none is linked into the library.
TOOLS_HDR := $(STATS_HDR) $(NODE_HDR) $(wildcard tools/*.h pause/*.h) $(POOL_HDR)
JOBGATE_SRC := pause/jobgate.c

# The reader behind `cupool stat/top/flush/dump/job`.
STAT_SRC := tools/stat.c tools/top.c tools/flush.c tools/job.c tools/reader.c tools/jobview.c \
            common/args.c $(JOBGATE_SRC) $(NODE_SRC) $(STATS_SRC)
$(BUILD)/cupool-stat: $(STAT_SRC) $(TOOLS_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TOOLS_INC) $(STAT_SRC) -o $@

# cupool exporter: every process under cupool on the node, over HTTP
# (libmicrohttpd's server).
EXPORTER_SRC := tools/exporter.c tools/exporter_scrape.c common/args.c node/gpus.c \
                $(NODE_SRC) $(STATS_SRC)
$(BUILD)/cupool-exporter: $(EXPORTER_SRC) $(TOOLS_HDR) | deps
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TOOLS_INC) $(EXPORTER_SRC) -lmicrohttpd -o $@

# cupool pause and resume: the driver's checkpoint calls (dlopen'd at run
# time, as the shim finds CUDA), a process's page for its flush and for
# cupool's own move of its memory, the NCCL job's controller.
PAUSE_SRC := pause/main.c common/args.c pause/pause.c pause/job.c pause/move.c pause/say.c $(JOBGATE_SRC) $(NODE_SRC) $(STATS_SRC)
$(BUILD)/cupool-pause: $(PAUSE_SRC) $(TOOLS_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(TOOLS_INC) $(CUDA_INC) $(PAUSE_SRC) -ldl -o $@

# The shim's option table for `cupool run` (check and translate options).
OPTIONS_SRC := tools/options.c shim/base/config.c $(STATS_SRC) $(POOL_SRC)
$(BUILD)/cupool-options: $(OPTIONS_SRC) $(SHIM_HDR) $(STATS_HDR) $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(STATS_INC) -Ishim/base $(OPTIONS_SRC) -lpthread -o $@

# The trace tools behind `cupool replay/plot/import-torch`: the real pool
# code on a simulated device.
TRACE_SRC := trace/trace_gz.c trace/replay.c trace/plot.c trace/sim_backend.c trace/trace.c \
             stats/format.c common/text.c common/clock.c
TRACE_HDR := $(wildcard trace/*.h)
$(BUILD)/cupool-trace: tools/trace.c common/args.c $(TRACE_SRC) $(TRACE_HDR) $(POOL_SRC) $(STATS_HDR) $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(STATS_INC) -Itools $< common/args.c $(TRACE_SRC) $(POOL_SRC) -lpthread -lm -lz -o $@

$(BUILD)/asan/test_stats: test/test_stats.c $(STATS_SRC) $(NODE_SRC) $(STATS_HDR) $(NODE_HDR) $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) $(STATS_INC) -Inode $< $(STATS_SRC) $(NODE_SRC) -lcmocka -lpthread -o $@

# What a cgroup path vouches for (the exporter's labels), on fixture paths.
$(BUILD)/asan/test_proclabels: test/test_proclabels.c node/proclabels.c node/proclabels.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) -Inode $< node/proclabels.c -lcmocka -o $@
$(BUILD)/asan/test_safefile: test/test_safefile.c common/safefile.c common/safefile.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) -Icommon $< common/safefile.c -lcmocka -o $@
# The node scan and the NCCL job's selection of its ranks (node/, jobgate.c).
$(BUILD)/asan/test_node $(BUILD)/asan/test_jobgate: $(BUILD)/asan/%: test/%.c $(STATS_SRC) $(NODE_SRC) $(JOBGATE_SRC) $(TOOLS_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) $(TOOLS_INC) -Itest $< $(STATS_SRC) $(NODE_SRC) $(JOBGATE_SRC) \
	    -lcmocka -lpthread -o $@

$(BUILD)/asan/test_config: test/test_config.c shim/base/config.c $(STATS_SRC) $(POOL_SRC) $(SHIM_HDR) $(STATS_HDR) $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) $(STATS_INC) -Ishim/base $< shim/base/config.c $(STATS_SRC) $(POOL_SRC) \
	    -lcmocka -lpthread -o $@

# The hand-off of descriptors between processes (its server is a thread).
$(BUILD)/tsan/test_handoff: test/test_handoff.c shim/entry/handoff.c shim/base/log.c common/clock.c $(SHIM_HDR) $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(TSAN) $(SHIM_INC) $< shim/entry/handoff.c shim/base/log.c common/clock.c \
	    -lcmocka -lpthread -o $@

$(BUILD)/tsan/test_owner: test/test_owner.c shim/device/owner.c shim/device/owner.h
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(TSAN) -Ipool -Ishim/device -Ishim/base $< shim/device/owner.c -lcmocka -lpthread -o $@

# test_shim: the harness (test/shim/harness.c), one test-<feature>.c per
# feature, main.c listing them.
SHIM_TEST_SRC := $(wildcard test/shim/*.c)
$(BUILD)/test_shim: $(SHIM_TEST_SRC) test/shim/harness.h test/skip.h $(SHIM_HDR)
	$(CC) $(ALL_CFLAGS) $(SHIM_INC) -Itest -DREADER='"$(BUILD)/cupool-stat"' -DBUILT='"$(BUILD)"' \
	    -DTRACER='"$(BUILD)/cupool-trace"' $(SHIM_TEST_SRC) -lcmocka -o $@

# cupool pause's own move, on the simulated driver (plain build).
$(BUILD)/test_pause_move: test/test_pause_move.c $(BUILD)/libcupool.so $(BUILD)/cupool-pause \
                          $(BUILD)/rt/pause_prog | cmocka-check
	$(CC) $(ALL_CFLAGS) -DBUILT='"$(BUILD)"' $< -lcmocka -o $@

SHIM_VARIANTS := $(BUILD) $(BUILD)/asan $(BUILD)/tsan
SHIM_DEPS := $(BUILD)/test_shim $(BUILD)/cupool-stat $(BUILD)/cupool-exporter $(BUILD)/cupool-trace $(BUILD)/cupool-options $(BUILD)/cupool-pause $(foreach v,$(SHIM_VARIANTS),$(v)/libcupool.so $(v)/rt/rt_prog $(v)/rt/drv_prog $(v)/rt/libnext.so)

$(BUILD)/pool/%.o: pool/%.c $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/libcupool_pool.a: $(patsubst %.c,$(BUILD)/%.o,$(POOL_SRC))
	ar rcs $@ $^

$(BUILD)/asan/%: test/%.c $(POOL_SRC) $(SIM_SRC) $(POOL_HDR) $(TEST_HDR) $(TRACE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) $(TEST_INC) $< $(POOL_SRC) $(SIM_SRC) \
	    -lcmocka -lpthread -o $@

# test_pool: the pool's rules, its segments' in test_pool_segments.c.
$(BUILD)/asan/test_pool: test/test_pool.c test/test_pool_segments.c $(POOL_SRC) $(SIM_SRC) \
                         $(POOL_HDR) $(TEST_HDR) $(TRACE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) $(TEST_INC) $(filter test/%.c,$^) $(POOL_SRC) $(SIM_SRC) \
	    -lcmocka -lpthread -o $@

$(BUILD)/tsan/%: test/%.c $(POOL_SRC) $(SIM_SRC) $(POOL_HDR) $(TEST_HDR) $(TRACE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(TSAN) $(TEST_INC) $< $(POOL_SRC) $(SIM_SRC) \
	    -lcmocka -lpthread -o $@

$(BUILD)/bench_pool: test/bench_pool.c $(POOL_SRC) $(SIM_SRC) $(POOL_HDR) $(TEST_HDR) $(TRACE_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O2 $(TEST_INC) $< $(POOL_SRC) $(SIM_SRC) -lpthread -lm -o $@

$(BUILD)/asan/test_trace: test/test_trace.c $(TRACE_SRC) $(TRACE_HDR) $(POOL_SRC) $(STATS_HDR) $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) $(STATS_INC) $< $(TRACE_SRC) $(POOL_SRC) \
	    -lcmocka -lpthread -lm -lz -o $@

# The recorder with its test window (recorder.h), under ThreadSanitizer.
$(BUILD)/tsan/test_recorder: test/test_recorder.c shim/base/recorder.c trace/trace.c common/safefile.c common/text.c common/clock.c stats/format.c $(SHIM_HDR) $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(TSAN) -DSHIM_TRACE_TESTING $(SHIM_INC) $< shim/base/recorder.c \
	    trace/trace.c common/safefile.c common/text.c common/clock.c stats/format.c -lcmocka -lpthread -o $@

# A cmocka program whose every outcome is known: test/test_run_tests.sh
# checks scripts/run-tests' counting against it.
$(BUILD)/planted_cmocka: test/planted_cmocka.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $< -lcmocka -o $@

TEST_BINS := $(addprefix $(BUILD)/asan/,$(POOL_TESTS) test_config test_stats test_safefile \
                                       test_trace test_proclabels test_node test_jobgate) \
             $(addprefix $(BUILD)/tsan/,$(TSAN_TESTS) test_recorder test_owner test_handoff)
# Built only once the tests' tools are there (installed, or named).
$(TEST_BINS) $(BUILD)/test_shim $(BUILD)/planted_cmocka: | cmocka-check
$(BUILD)/cupool-trace: | deps

# Every test program, a line as each ends (a failed one's output after it;
# every output in $(BUILD)/test-logs), each reason for a skip once, then one
# line counting every test: "N passed, N failed, N skipped, N errors, N
# unfinished: N tests", then the plain "N passed, N failed, N skipped" (an
# error or unfinished test counted as failed). scripts/run-tests spreads the commands over two
# lanes a core (TEST_LANES=N for another count), each command in its
# own HOME, TMPDIR, XDG_RUNTIME_DIR and page directory: the quick shape
# check first, then the longest first (as timed in $(BUILD)/test-times by
# the last run; on a first run, in the order below). test_shim runs its
# features (test/shim/main.c) a few at a time, so that no build variant's
# run is one long pole.
SHIM_TSAN_GROUPS := job group signals trace vmm,stats turn,memory,fence \
                    driver,cupti,pause,cli,framework
SHIM_GROUPS := framework job group trace turn,cli,stats,pause,signals,vmm,driver,fence,memory,cupti
SHIM_RUN := timeout 600 $(BUILD)/test_shim -g
TSAN_RT = $(shell $(CC) -print-file-name=libtsan.so)
ASAN_RT = $(shell $(CC) -print-file-name=libasan.so)
PAUSE_MOVE_DEPS := $(BUILD)/test_pause_move $(foreach v,$(SHIM_VARIANTS),$(v)/rt/pause_prog)
# make test: what the build and the tests need is installed first, alone
# (apt-get runs one at a time); then everything builds on every core
# (JOBS: nproc), then the tests run.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
.PHONY: test-build
test-build: all cmocka-check $(TEST_BINS) $(SHIM_DEPS) $(BUILD)/rt/libfailmalloc.so \
            $(BUILD)/planted_cmocka $(BUILD)/rt/evil_page $(PAUSE_MOVE_DEPS)
test:
	@$(MAKE) --no-print-directory deps cmocka-check
	@$(MAKE) --no-print-directory -j$(JOBS) test-build
	@PATH="$(abspath $(BUILD))/tools:$$PATH" TEST_LOGS=$(BUILD)/test-logs \
	    TEST_TIMES=$(BUILD)/test-times scripts/run-tests \
	    "python3 scripts/check-shape && echo 'ok   the code shape (scripts/check-shape)' || \
	     { echo 'FAIL the code shape (scripts/check-shape)'; exit 1; }" \
	    "timeout 900 $(BUILD)/asan/test_pool_random" "timeout 600 $(BUILD)/asan/test_trace" \
	    $(foreach g,$(SHIM_TSAN_GROUPS),"$(SHIM_RUN) $(g) $(BUILD)/tsan $(TSAN_RT)") \
	    "timeout 600 python3 test/test_safety.py $(BUILD)" \
	    "timeout 600 python3 test/test_exporter.py $(BUILD)" \
	    "timeout 300 python3 test/test_slurm.py $(BUILD)" \
	    "timeout 120 python3 test/test_kube_schema.py $(BUILD)" \
	    "timeout 300 python3 test/test_extension_points.py $(BUILD)" \
	    "timeout 300 $(BUILD)/test_pause_move" \
	    "timeout 600 $(BUILD)/test_pause_move $(BUILD)/tsan $(TSAN_RT)" \
	    "timeout 600 $(BUILD)/test_pause_move $(BUILD)/asan $(ASAN_RT)" \
	    $(foreach g,$(SHIM_GROUPS),"$(SHIM_RUN) $(g) $(BUILD)") \
	    $(foreach g,$(SHIM_GROUPS),"$(SHIM_RUN) $(g) $(BUILD)/asan $(ASAN_RT)") \
	    "timeout 600 python3 test/test_import_torch.py $(BUILD)" \
	    $(foreach t,$(filter-out %/test_pool_random %/test_trace,$(TEST_BINS)),"timeout 600 $(t)") \
	    "timeout 300 python3 test/test_docs_examples.py $(BUILD)" \
	    "timeout 120 test/test_run_tests.sh $(BUILD)/planted_cmocka"

bench: $(BUILD)/bench_pool $(BUILD)/libcupool.so $(BUILD)/rt/rt_prog $(BUILD)/cupool-trace
	scripts/bench-pool
	scripts/bench-shim
	scripts/bench-traces

demo: all $(BUILD)/rt/rt_prog
	scripts/demo

# The GPU programs the GPU scripts run (scripts/gpu-check, gpu-reach,
# bench-gpu, bench-stitch, gpu-traces): `make gpu` on a machine with nvcc.
# NAME from test/gpu/NAME.cu or NAME.c on the shared runtime; NAME_static
# linked as nvcc links by default (the runtime linked statically).
NVCC     ?= $(CUDA)/bin/nvcc
GPU_ARCH ?= sm_90
GPU      := $(BUILD)/gpu
GPU_CC   := $(CC) -O2 -std=c11 -D_GNU_SOURCE $(CUDA_INC)
SHARED_RT := -L$(CUDA)/lib64 -lcudart -Wl,-rpath,$(CUDA)/lib64 -lpthread -lm
STATIC_RT := -L$(CUDA)/lib64 -lcudart_static -ldl -lrt -lpthread
CUPTI_INC := $(firstword $(wildcard $(CUDA)/include/cupti.h $(CUDA)/extras/CUPTI/include/cupti.h))
CUPTI_LIB := $(dir $(firstword $(wildcard $(CUDA)/lib64/libcupti.so $(CUDA)/extras/CUPTI/lib64/libcupti.so)))
GPU_PROGS := $(addprefix $(GPU)/,race trim_wait stitch_cost race_static launch_static \
               vmm_parts pair_bench mix_bench hold fence_parts getdev_cost pair_bench_static \
               hold_static rt_prog rt_prog_static gpa_probe cupti_count.so)
.PHONY: gpu
gpu: $(GPU_PROGS)
$(GPU)/%: test/gpu/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -arch=$(GPU_ARCH) -cudart shared $< -o $@
$(GPU)/%_static: test/gpu/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -arch=$(GPU_ARCH) $< -o $@
$(GPU)/launch_static: test/gpu/launch_bench.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -arch=$(GPU_ARCH) $< -o $@
$(GPU)/vmm_parts: test/gpu/vmm_parts.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -arch=$(GPU_ARCH) $< -lcuda -o $@
$(GPU)/%: test/gpu/%.c
	@mkdir -p $(dir $@)
	$(GPU_CC) $< $(SHARED_RT) -o $@
$(GPU)/fence_parts: test/gpu/fence_parts.c
	@mkdir -p $(dir $@)
	$(GPU_CC) $< $(SHARED_RT) -lcuda -o $@
$(GPU)/getdev_cost: test/gpu/getdev_cost.c
	@mkdir -p $(dir $@)
	$(GPU_CC) $< $(SHARED_RT) -lcuda -o $@
$(GPU)/%_static: test/gpu/%.c
	@mkdir -p $(dir $@)
	$(GPU_CC) $< $(STATIC_RT) -o $@
$(GPU)/rt_prog: $(PROG_SRC) test/prog/prog.h
	@mkdir -p $(dir $@)
	$(GPU_CC) $(PROG_SRC) $(SHARED_RT) -o $@
$(GPU)/rt_prog_static: $(PROG_SRC) test/prog/prog.h
	@mkdir -p $(dir $@)
	$(GPU_CC) $(PROG_SRC) $(STATIC_RT) -o $@
$(GPU)/gpa_probe: test/gpu/gpa_probe.c
	@mkdir -p $(dir $@)
	$(CC) -O2 $(CUDA_INC) $< -ldl -o $@
$(GPU)/cupti_count.so: test/gpu/cupti_count.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -shared -fPIC -I$(dir $(CUPTI_INC)) $< -L$(CUPTI_LIB) -lcupti \
	    -Wl,-rpath,$(CUPTI_LIB) -o $@

# NCCL's programs (scripts/gpu-comm): against the libnccl.so.2 of NCCL_LIB,
# by default the one PyTorch's wheels bring.
# `make -s nccl-lib` prints that folder (empty when NCCL is not found).
NCCL_FIND := $${NCCL_LIB:-$$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib'))" 2>/dev/null)}
.PHONY: gpu-nccl nccl-lib
nccl-lib:
	@echo "$(NCCL_FIND)"
gpu-nccl: $(GPU)/nccl_comm $(GPU)/nccl_lat
# nccl_lat is built the nvcc default way: the static runtime.
$(GPU)/nccl_lat: test/gpu/nccl_lat.cu
	@mkdir -p $(dir $@)
	lib="$(NCCL_FIND)" && test -e "$$lib/libnccl.so.2" && \
	$(NVCC) -O2 -arch=$(GPU_ARCH) $< -L"$$lib" -l:libnccl.so.2 \
	    -Xlinker -rpath="$$lib" -o $@
$(GPU)/nccl_comm: test/gpu/nccl_comm.cu
	@mkdir -p $(dir $@)
	lib="$(NCCL_FIND)" && test -e "$$lib/libnccl.so.2" && \
	$(NVCC) -O2 -arch=$(GPU_ARCH) -cudart shared $< -L"$$lib" -l:libnccl.so.2 \
	    -Xlinker -rpath="$$lib" -o $@

# The library and the programs behind `cupool` go to $(PREFIX)/lib, where
# the installed `cupool` finds them; only `cupool` goes on the PATH.
INSTALLED_LIB := libcupool.so cupool-stat cupool-exporter cupool-trace cupool-options cupool-pause \
                 cupool-import-torch
install: all
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/bin
	install -m 755 $(BUILD)/libcupool.so $(BUILD)/cupool-stat $(BUILD)/cupool-exporter $(BUILD)/cupool-trace \
	    $(BUILD)/cupool-options $(BUILD)/cupool-pause scripts/cupool-import-torch \
	    $(DESTDIR)$(PREFIX)/lib/
	install -m 755 scripts/cupool $(DESTDIR)$(PREFIX)/bin/

uninstall:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/lib/,$(INSTALLED_LIB)) $(DESTDIR)$(PREFIX)/bin/cupool

clean:
	rm -rf $(BUILD)
