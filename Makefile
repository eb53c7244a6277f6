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

POOL_SRC := pool/pool.c pool/bins.c pool/tree.c pool/addrmap.c pool/check.c
POOL_HDR := $(wildcard pool/*.h)
TEST_HDR := $(wildcard test/*.h)
SIM_SRC  := test/sim_backend.c
TEST_INC := -Ipool -Itest

# Unit and property tests of pool/, built with ASan+UBSan.
POOL_TESTS := test_pool test_pool_random test_pool_frag
# Threaded tests, built with TSan.
TSAN_TESTS := test_pool_threads

.PHONY: all test bench clean install
all: $(BUILD)/libcupool_pool.a

$(BUILD)/pool/%.o: pool/%.c $(POOL_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -fvisibility=hidden -c $< -o $@

$(BUILD)/libcupool_pool.a: $(patsubst %.c,$(BUILD)/%.o,$(POOL_SRC))
	ar rcs $@ $^

$(BUILD)/asan/%: test/%.c $(POOL_SRC) $(SIM_SRC) $(POOL_HDR) $(TEST_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(ASAN) $(TEST_INC) $< $(POOL_SRC) $(SIM_SRC) \
	    -lcmocka -lpthread -o $@

$(BUILD)/tsan/%: test/%.c $(POOL_SRC) $(SIM_SRC) $(POOL_HDR) $(TEST_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(WARN) $(DEFS) $(TSAN) $(TEST_INC) $< $(POOL_SRC) $(SIM_SRC) \
	    -lcmocka -lpthread -o $@

$(BUILD)/bench_pool: test/bench_pool.c $(POOL_SRC) $(SIM_SRC) $(POOL_HDR) $(TEST_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -O2 $(TEST_INC) $< $(POOL_SRC) $(SIM_SRC) -lpthread -lm -o $@

TEST_BINS := $(addprefix $(BUILD)/asan/,$(POOL_TESTS)) \
             $(addprefix $(BUILD)/tsan/,$(TSAN_TESTS))

test: all $(TEST_BINS)
	@set -e; for t in $(TEST_BINS); do echo "== $$t"; $$t; done
	@echo "make test: all test programs passed"

bench: $(BUILD)/bench_pool
	scripts/bench-pool

install: all
	install -d $(DESTDIR)$(PREFIX)/lib
	install -m 644 $(BUILD)/libcupool_pool.a $(DESTDIR)$(PREFIX)/lib/

clean:
	rm -rf $(BUILD)
