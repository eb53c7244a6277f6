#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_run_tests.sh PLANTED - scripts/run-tests checked against planted
# commands whose every outcome is known (PLANTED: build/planted_cmocka):
# cmocka's pass, fail, skip and error in a teardown, a program killed in
# its second test, one ended by its timeout, and Python-style checks. The
# total line must count every test as cmocka does; the run must fail; a
# command must see its own HOME, XDG_RUNTIME_DIR, TMPDIR and page
# directory; and a command that leaves a cupool* name in /tmp must fail the
# run. Prints "ok NAME" or "FAIL NAME" per check (run-tests counts those).
set -uo pipefail
planted=${1:?usage: test_run_tests.sh build/planted_cmocka}
here=$(mktemp -d "${TMPDIR:-/tmp}/run-tests-check-XXXXXX")
# The nested runs look for leaks in a place of this check's own: other
# tests beside it make and remove cupool* names in /tmp and /dev/shm.
mkdir -p "$here/shared"
export TEST_LEAK_PLACES=$here/shared
trap 'rm -rf "$here"' EXIT
export TEST_TIMES=$here/times # not the real run's
failed=0
check() { # NAME CONDITION-STATUS
    if (($2 == 0)); then echo "ok $1"; else echo "FAIL $1"; failed=1; fi
}

# Every outcome: 2 passed (mixed, python), 1 failed, 2 skipped, 1 error
# (mixed's teardown), 5 unfinished (crash: 3, killed in its second test;
# hang: 2, ended by its timeout).
out=$(TEST_LOGS=$here/logs TEST_LANES=2 scripts/run-tests \
    "$planted mixed" "$planted crash" "timeout 2 $planted hang" \
    "echo 'ok one'; echo 'skip two: planted'" 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/    | /'
total=$(printf '%s\n' "$out" | tail -2 | head -1)
plain=$(printf '%s\n' "$out" | tail -1)
want="2 passed, 1 failed, 2 skipped, 1 errors, 5 unfinished: 11 tests"
[[ $total == "$want" ]]
check "the total line counts every test (want: $want; got: $total)" $?
[[ $plain == "2 passed, 7 failed, 2 skipped" ]]
check "the last line, CI's, counts errors and unfinished tests as failed (got: $plain)" $?
((rc == 1))
check "a run with failures, errors and crashes fails (exit $rc)" $?
# Each failed test again near the end, by name, with its assertion.
again=$(printf '%s\n' "$out" | sed -n '/^failed, again:$/,$p')
printf '%s\n' "$again" | grep -q "^     planted_cmocka mixed: fails$" &&
    printf '%s\n' "$again" | grep -q "0x1 != 0x2" &&
    printf '%s\n' "$again" | grep -q "^     planted_cmocka mixed: passes"
check "each failed or errored test is named again near the end, with its assertion" $?
printf '%s\n' "$out" | grep -q "^FAIL \[ *[0-9]/4\] planted_cmocka crash .*3 unfinished"
check "the killed program's line says FAIL and how many did not finish" $?
printf '%s\n' "$out" | grep -q "^FAIL \[ *[0-9]/4\] planted_cmocka hang .*1 passed\|^FAIL \[ *[0-9]/4\] planted_cmocka hang .*2 unfinished"
check "the timed-out program's line says FAIL" $?

# Each command's own places, none of them the caller's.
out=$(TEST_LOGS=$here/logs2 scripts/run-tests \
    'for v in HOME XDG_RUNTIME_DIR TMPDIR CUPOOL_PAGE_DIR; do d=${!v}; [[ -d $d && $d == */cupool-tests-*/0/* ]] && echo "ok $v" || echo "FAIL $v=$d"; done' 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/    | /'
[[ $rc == 0 && $(printf '%s\n' "$out" | tail -1) == "4 passed, 0 failed, 0 skipped" ]]
check "a command runs in its own HOME, XDG_RUNTIME_DIR, TMPDIR and page directory" $?

# A command that leaves a cupool* name where the run looks fails it, which names it.
out=$(TEST_LOGS=$here/logs3 scripts/run-tests \
    "d=\$(mktemp -d $here/shared/cupool-planted-leak-XXXXXX) && echo \"ok leaked \$d\"" 2>&1)
rc=$?
printf '%s\n' "$out" | sed 's/^/    | /'
leak=$(printf '%s\n' "$out" | sed -n "s|^ *\($here/shared/cupool-planted-leak-[A-Za-z0-9]*\)\$|\1|p")
rm -rf "$here"/shared/cupool-planted-leak-* # this check's own
[[ $rc == 1 && -n $leak ]]
check "a command that leaves a cupool* name where the run looks fails it, named" $?
exit $failed
