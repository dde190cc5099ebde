#!/bin/bash
#
# Runs every test tier on this machine, after setting it up from scratch:
#   1  unit tests (googletest; no hardware); no include or call circle in
#      src/ (contrib/check-circles.sh)
#   1b loading checks on the host (UCX version refusal, no-hardware paths)
#   2  real verbs in the soft-RoCE guest: UCT, UCP (ucx_perftest), Open MPI,
#      faults, byte-exact data; then a --pcie-pairs guest (test/rxe/
#      pcie_pairs.sh): system devices, the GPU x NIC matrix, a lane per
#      NIC for each GPU, ACS redirect set and cleared, UCP's bytes per NIC;
#      once more with an emulated IOMMU (--iommu), and once with two NICs
#      beside each GPU (--nics-per-pair 2: UCP's rails)
#   3  GPU tests: run where a CUDA driver and GPU are present, skipped (and
#      said so) elsewhere
#   4  conformance: UCX's own UCT test suites (the CI subset) in the guest,
#      rc_gdr beside rc_verbs (contrib/conformance.sh --core)
#   5  releases: the same source against upstream UCX (built once per machine
#      by contrib/ucx-upstream.sh, cached): 1.22.0 every tier above, 1.16.0
#      and 1.19.1 build + unit + host + one guest UCP run, 1.18.1 and 1.20.1
#      (and 1.14.1, 1.15.0, 1.17.0, 1.21.0 where their tarballs are there)
#      build + unit + host; every module loaded into every other release
#      (refused in one line, no crash); then each release's own UCT suites,
#      as the time budget allows
#   6  the stand-in NIC, native (test/tnic/run.sh): the guest tier's checks
#      and the fault tests on a user-space RC device, no qemu; run early, as
#      it is fast (RC_GDR_TNIC=0 leaves it out); after tier 4, UCX's own UCT
#      suites on it (contrib/conformance.sh --core --tnic)
#   7  the install (test/install/run.sh): make distcheck, and the Debian
#      package built from this tree, installed into a clean soft-RoCE guest
#      where the package's environment alone makes ucx_info, ucx_perftest
#      and Open MPI use rc_gdr, then removed without a trace
#      (RC_GDR_INSTALL=0 leaves it out)
#   8  the wire (test/wire/run.sh --ci): rc_gdr beside rc_verbs between two
#      soft-RoCE guests whose link loses 1%, is cut for 2 s, and whose peer
#      host is killed; every byte compared, a lost peer reported within
#      README's bounds; rc_gdr's cells decide, rc_verbs' that do not hold
#      are skipped (the reference). First its verdict's self-test, no guest
#      (test/wire/verdict_test.sh). It runs after tier 5's releases,
#      before their own UCT suites, if the time budget allows
#      (RC_GDR_WIRE=0 leaves it out)
# and ends with one line "N passed, N failed, N skipped" totalled over the
# tiers run.
#
# Usage: contrib/test.sh [--no-vm]
#   RC_GDR_TNIC=0                            leaves tier 6 out
#   RC_GDR_CONFORMANCE=0                     leaves tier 4 out
#   RC_GDR_INSTALL=0                         leaves tier 7 out
#   RC_GDR_WIRE=0                            leaves tier 8 out
#   RC_GDR_RELEASES="1.22.0 1.16.0 1.19.1 1.18.1 1.20.1 1.14.1 1.15.0
#                   1.17.0 1.21.0"  the releases tier
#                   5 runs (this is the default; "none" for none). Their
#                   sources come from shared/deps beside the repository
#                   (RC_GDR_DEPS; contrib/ucx-upstream.sh); their builds are
#                   cached. By default a release whose source tarball is
#                   not there is skipped, step by step, and says so; one
#                   named in RC_GDR_RELEASES must be there.
#   RC_GDR_TIME_BUDGET_S=4500 (default): a tier 5 step that would end
#   (by its usual length) after that many seconds of this run is skipped,
#   and says so (CI allows 90 minutes; the releases' first builds are long)
#
set -uo pipefail

cd "$(dirname "$0")/.."
RUN_VM=1
START_S=$(date +%s)
BUDGET_S=${RC_GDR_TIME_BUDGET_S:-4500}
[ "${1:-}" = "--no-vm" ] && RUN_VM=0

PASSED=0
FAILED=0
SKIPPED=0

tally() { # passed failed skipped
    PASSED=$((PASSED + $1)); FAILED=$((FAILED + $2)); SKIPPED=$((SKIPPED + $3))
}

# Reads "N passed, N failed[, N skipped]" from the last such line of a
# tier's output; a tier that printed none (it crashed or hung) counts as one
# failure.
tally_plain() {
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n1)
    if [ -z "$line" ]; then
        tally 0 1 0
        return
    fi
    # "N passed, N failed" or "N passed, N failed, N skipped"
    tally "$(echo "$line" | awk '{print $1}')" \
          "$(echo "$line" | awk '{print $3}')" \
          "$(echo "$line" | awk '{print ($5 == "" ? 0 : $5)}')"
}

# Skips a step, counted, when it would end past the run's time budget
over_budget() { # what [seconds it takes]
    if [ $(( $(date +%s) - START_S + ${2:-0} )) -ge "$BUDGET_S" ]; then
        echo "SKIP $1: ${2:+it takes about $2 s, which would end }past" \
             "the run's time budget (RC_GDR_TIME_BUDGET_S=$BUDGET_S)"
        tally 0 0 1
        return 0
    fi
    return 1
}

# Reads "N passed, N failed, N skipped" from the last such line of a tier's
# output; none at all (it crashed or hung) counts as one failure.
tally_counts() {
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$1" |
           tail -n1)
    if [ -z "$line" ]; then
        tally 0 1 0
        return
    fi
    # shellcheck disable=SC2046  # three numbers
    tally $(echo "$line" | awk '{print $1, $3, $5}')
}

# Reads a googletest JSON report (GTEST_OUTPUT=json:FILE): the tests that
# ran, as passed, failed and skipped. No report, or one that does not parse,
# means the binary crashed or hung: one failure.
tally_gtest() {
    local counts
    counts=$(python3 -c '
import json, sys
p = f = s = 0
for suite in json.load(open(sys.argv[1]))["testsuites"]:
    for test in suite["testsuite"]:
        if test.get("status") != "RUN":
            continue
        if test.get("failures"):
            f += 1
        elif test.get("result") == "SKIPPED":
            s += 1
        else:
            p += 1
print(p, f, s)' "$1" 2> /dev/null)
    if [ -z "$counts" ]; then
        tally 0 1 0
        return
    fi
    # shellcheck disable=SC2086  # three numbers
    tally $counts
}

echo "== setup and build"
if ! contrib/build.sh; then
    echo "build failed"
    echo "0 passed, 1 failed"
    exit 1
fi

OUT=$(mktemp -d /tmp/rc_gdr_test.XXXXXX)

# Tier 5's upstream UCX builds start now, beside tiers 1-4 and at the lowest
# priority: the soft-RoCE guest leaves a core idle much of the time, and on
# a new machine these builds are most of the run. Tier 5 waits for them.
RELEASES=${RC_GDR_RELEASES:-1.22.0 1.16.0 1.19.1 1.18.1 1.20.1 1.14.1 1.15.0 1.17.0 1.21.0}
[ "$RELEASES" = none ] && RELEASES=""
# Build + unit + host only: each builds its UCX when its turn comes, if the
# time budget allows, not beside tiers 1-4. The releases shared/deps does not
# hold (1.14.1, 1.15.0, 1.17.0, 1.21.0: verified by hand from UCX's tags,
# doc/MEASUREMENTS.md) are skipped here, saying so, until their tarballs are
# put there.
CHEAP_RELEASES=" 1.18.1 1.20.1 1.14.1 1.15.0 1.17.0 1.21.0 "
# A clone without the release tarballs: the default releases missing are
# skipped, step by step (build, unit, host, guest), counted as skipped
. contrib/lib/releases.sh
DEPS=$(contrib/ucx-upstream.sh --print-deps)
# shellcheck disable=SC2086
release_sources "$DEPS" "$([ -n "${RC_GDR_RELEASES:-}" ] && echo 1)" $RELEASES
RELEASES=$RELEASES_PRESENT
MISSING=$RELEASES_MISSING
PREBUILD_PID=""
if [ -n "$RELEASES" ]; then
    (
        for v in $RELEASES; do
            [[ "$CHEAP_RELEASES" == *" $v "* ]] && continue
            nice -n 19 contrib/ucx-upstream.sh "$v"
        done
        if [[ " $RELEASES " == *" 1.22.0 "* ]]; then
            nice -n 19 contrib/ucx-upstream.sh --cuda 1.22.0
        fi
    ) > "$OUT/prebuild" 2>&1 &
    PREBUILD_PID=$!
fi

echo "== tier 1: unit tests"
GTEST_OUTPUT=json:$OUT/unit.json build/test/gtest/gtest_rc_gdr 2>&1 |
    tee "$OUT/unit" |
    grep -E '^\[  (FAILED|SKIPPED|PASSED) |^\[ +(FAILED|SKIPPED) +\]' || true
tally_gtest "$OUT/unit.json"

# One check: any circle in src/ fails it; its self-test first proves that
# it finds the circles planted in test/circles
echo "== tier 1: no include or call circle in src/ (contrib/check-circles.sh)"
test/circles/run.sh 2>&1 | tee "$OUT/circles-self"
tally_plain "$OUT/circles-self"
if contrib/check-circles.sh 2>&1 | tee "$OUT/circles"; then
    echo "PASS check-circles"
    tally 1 0 0
else
    echo "FAIL check-circles: the circles above (contrib/check-circles.py" \
         "says which upward calls may be allowed)"
    tally 0 1 0
fi

# No shell script pipes into grep -q (contrib/check-pipefail.sh says why);
# its self-test first proves it finds a planted one
echo "== tier 1: no pipe into grep -q in the shell scripts (contrib/check-pipefail.sh)"
if contrib/check-pipefail.sh --self-test 2>&1 | tee "$OUT/pipefail-self"; then
    tally 1 0 0
else
    tally 0 1 0
fi
if contrib/check-pipefail.sh 2>&1 | tee "$OUT/pipefail"; then
    echo "PASS check-pipefail"
    tally 1 0 0
else
    echo "FAIL check-pipefail: write grep -q PATTERN <<<\"\$text\" instead"
    tally 0 1 0
fi

echo "== tier 1: the unpackers of peer input, fuzzed under AddressSanitizer"
GTEST_OUTPUT=json:$OUT/fuzz.json build/test/gtest/fuzz_addr 2>&1 |
    tee "$OUT/fuzz" |
    grep -E '^\[  (FAILED|SKIPPED|PASSED) |^\[ +(FAILED|SKIPPED) +\]' || true
tally_gtest "$OUT/fuzz.json"

echo "== tier 1: the md under ThreadSanitizer, free hooks on other threads"
TSAN_OPTIONS=halt_on_error=1 GTEST_OUTPUT=json:$OUT/tsan.json \
    build/test/gtest/tsan_md 2>&1 | tee "$OUT/tsan" |
    grep -E '^\[  (FAILED|SKIPPED|PASSED) |^\[ +(FAILED|SKIPPED) +\]' || true
tally_gtest "$OUT/tsan.json"

# UCM's mmap hooks would run in threads TSan has already torn down
echo "== tier 1: the cache's biased lock under ThreadSanitizer"
UCX_MEM_MMAP_HOOK_MODE=none TSAN_OPTIONS=halt_on_error=1 \
    GTEST_OUTPUT=json:$OUT/tsan-lock.json \
    build/test/gtest/tsan_lock 2>&1 | tee "$OUT/tsan-lock" |
    grep -E '^\[  (FAILED|SKIPPED|PASSED) |^\[ +(FAILED|SKIPPED) +\]' || true
tally_gtest "$OUT/tsan-lock.json"

# The free hooks patch the stand-in driver here as they patch libcuda on a
# GPU machine (tier 3): hooks, then forwarding from UCM, one process each.
echo "== tier 1: CUDA free events over the stand-in driver (EMULATED GPU)"
for mode in hooks forward; do
    if [ $mode = hooks ]; then
        args=(--gtest_filter='-ucm_forward.*')
    else
        args=(--ucm-forward --gtest_filter='ucm_install.*:ucm_forward.*')
    fi
    RC_GDR_CUDA_LIBRARY=$PWD/build/test/mocks/libcuda.so.1 \
        GTEST_OUTPUT=json:$OUT/ucm-fake-$mode.json \
        build/test/gtest/ucm/gtest_rc_gdr_ucm "${args[@]}" 2>&1 |
        tee "$OUT/ucm-fake-$mode" |
        grep -E '^\[  (FAILED|SKIPPED|PASSED) |^\[ +(FAILED|SKIPPED) +\]' || true
    tally_gtest "$OUT/ucm-fake-$mode.json"
done

echo "== tier 1b: loading checks on the host"
test/host/run.sh 2>&1 | tee "$OUT/host"
tally_plain "$OUT/host"

if [ "${RC_GDR_TNIC:-1}" = 1 ]; then
    echo "== tier 6: stand-in NIC, native (test/tnic/run.sh; every result" \
         "says STAND-IN NIC)"
    test/tnic/run.sh 2>&1 | tee "$OUT/tnic"
    tally_counts "$OUT/tnic"
fi

if [ "$RUN_VM" = 1 ]; then
    echo "== tier 2: the soft-RoCE harness itself (exit status, timeout)"
    test/rxe/test_harness.sh 2>&1 | tee "$OUT/harness"
    harness_rc=${PIPESTATUS[0]}
    harness_failed=$(grep -c '^FAIL' "$OUT/harness")
    if [ "$harness_rc" != 0 ] && [ "$harness_failed" = 0 ]; then
        harness_failed=1 # it failed without saying which check
    fi
    tally "$(grep -c '^PASS' "$OUT/harness")" "$harness_failed" 0

    echo "== tier 2: real verbs in the soft-RoCE guest"
    contrib/rxe-vm.sh --timeout 2400 -- test/rxe/run.sh 2>&1 | tee "$OUT/rxe"
    tally_counts "$OUT/rxe"

    echo "== tier 2: the --pcie-pairs guest: two host bridges on two NUMA" \
         "nodes, each with a NIC and an EMULATED GPU placed beside it"
    contrib/rxe-vm.sh --pcie-pairs 2 --timeout 900 -- test/rxe/pcie_pairs.sh \
        2>&1 | tee "$OUT/pcie-pairs"
    tally_counts "$OUT/pcie-pairs"
    echo "== tier 2: the same guest with an emulated IOMMU (--iommu)"
    contrib/rxe-vm.sh --pcie-pairs 2 --iommu --timeout 900 -- \
        test/rxe/pcie_pairs.sh 2>&1 | tee "$OUT/pcie-pairs-iommu"
    tally_counts "$OUT/pcie-pairs-iommu"
    echo "== tier 2: the same guest with two NICs beside each GPU (UCP's rails)"
    contrib/rxe-vm.sh --pcie-pairs 2 --nics-per-pair 2 --timeout 900 -- \
        test/rxe/pcie_pairs.sh 2>&1 | tee "$OUT/pcie-pairs-rails"
    tally_counts "$OUT/pcie-pairs-rails"
fi

echo "== tier 3: GPU"
if [ -e /dev/nvidiactl ] || [ -e /dev/nvidia0 ]; then
    # The driver's attributes, memory kinds, DMA-BUF export, buffer IDs and
    # the staging engine on the real GPU; then the CUDA free hooks.
    GTEST_OUTPUT=json:$OUT/gpu.json \
        test/gpu/run_gpu_tests.sh -f 'cuda_gpu.*:stage.*' 2>&1 |
        tee "$OUT/gpu"
    tally_gtest "$OUT/gpu.json"
    GTEST_OUTPUT=json:$OUT/ucm.json build/test/gtest/ucm/gtest_rc_gdr_ucm \
        --gtest_filter='-ucm_forward.*' 2>&1 | tee "$OUT/ucm"
    tally_gtest "$OUT/ucm.json"
    GTEST_OUTPUT=json:$OUT/ucm-forward.json \
        build/test/gtest/ucm/gtest_rc_gdr_ucm --ucm-forward \
        --gtest_filter='ucm_install.*:ucm_forward.*' 2>&1 |
        tee "$OUT/ucm-forward"
    tally_gtest "$OUT/ucm-forward.json"
else
    echo "SKIP tier 3: no GPU on this machine (the GPU suites run where" \
         "a CUDA driver and device are present)"
fi

if [ "$RUN_VM" = 1 ] && [ "${RC_GDR_CONFORMANCE:-1}" = 1 ]; then
    echo "== tier 4: conformance, UCX's UCT suites (CI subset) in the guest," \
         "rc_gdr beside rc_verbs"
    contrib/conformance.sh --core --no-build 2>&1 | tee "$OUT/conformance"
    tally_counts "$OUT/conformance"
    # the same suites natively on the stand-in NIC (tier 6), with the gtest
    # binary tier 4 built
    if [ "${RC_GDR_TNIC:-1}" = 1 ] &&
       ! over_budget "tier 6: UCX's UCT suites on the stand-in NIC" 420; then
        echo "== tier 6: conformance, UCX's UCT suites (CI subset) natively" \
             "on the STAND-IN NIC, rc_gdr beside rc_verbs"
        contrib/conformance.sh --core --tnic --no-build 2>&1 |
            tee "$OUT/conformance-tnic"
        tally_counts "$OUT/conformance-tnic"
    fi
fi

# Tier 7 before tier 5, whose steps the time budget trims
if [ "${RC_GDR_INSTALL:-1}" = 1 ] &&
   ! over_budget "tier 7: the install (distcheck, package)" 600; then
    echo "== tier 7: the install: make distcheck, the Debian package in a" \
         "clean guest (test/install/run.sh)"
    vm_arg=()
    [ "$RUN_VM" = 1 ] || vm_arg=(--no-vm)
    test/install/run.sh "${vm_arg[@]}" 2>&1 | tee "$OUT/install"
    tally_counts "$OUT/install"
fi

# Tier 5: releases. 1.22.0 first: the full tiers run there.
if [ -n "$PREBUILD_PID" ]; then
    t0=$(date +%s)
    wait "$PREBUILD_PID" ||
        { echo "== tier 5: upstream UCX builds:"; tail -20 "$OUT/prebuild"; }
    echo "== tier 5: upstream UCX builds ready (waited $(( $(date +%s) - t0 )) s" \
         "after tier 4)"
fi
RELEASE_BUILDS=()
for v in $MISSING; do
    steps=3 # build, unit, host
    [[ "$CHEAP_RELEASES" == *" $v "* ]] || [ "$RUN_VM" = 0 ] ||
        steps=$((steps + 1)) # guest
    [ "$v" != 1.22.0 ] || steps=$((steps + 2 + RUN_VM)) # its CUDA build
    echo "SKIP tier 5 for UCX $v ($steps steps): no source tarball" \
         "$DEPS/ucx-$v.tar.gz (RC_GDR_DEPS names another directory;" \
         "RC_GDR_RELEASES=\"$v\" makes it a failure)"
    tally 0 0 "$steps"
done
# One release's steps: the build, its unit tests, the host's loading checks
# and the soft-RoCE guest (FILTER "" runs all of it), each skipped when it
# would end past the budget. With --cuda, the CUDA-built UCX of that release
# (cuda_copy, cuda_ipc, libucm_cuda, as GPU sites build it): its unit tests
# and guest run with the stand-in driver (contrib/env.sh --emulated-gpu),
# where UCX's CUDA modules load beside rc_gdr.
tier5_release() { # [--cuda] VERSION GUEST_FILTER GUEST_SECONDS ("": no guest)
    local cuda="" name v filter guest_est build est t0
    if [ "$1" = --cuda ]; then
        cuda=--cuda
        shift
    fi
    v=$1 filter=$2 guest_est=$3
    build=build-$v${cuda:+-cuda}
    name="UCX $v${cuda:+ built with CUDA}"

    # a release not built yet takes its UCX build too
    est=600
    contrib/ucx-upstream.sh $cuda --print-dir "$v" > /dev/null 2>&1 ||
        est=2400
    over_budget "tier 5 for $name" "$est" && return
    echo "== tier 5: $name: build (upstream UCX cached in /var/cache/rc_gdr)"
    t0=$(date +%s)
    if ! contrib/build.sh --ucx "$v" $cuda > "$OUT/make-$build" 2>&1; then
        tail -30 "$OUT/make-$build"
        echo "FAIL build against $name"
        tally 0 1 0
        return
    fi
    echo "PASS build against $name ($(( $(date +%s) - t0 )) s)"
    tally 1 0 0

    echo "== tier 5: $name: unit tests"
    (if [ -n "$cuda" ]; then
         . contrib/env.sh --emulated-gpu "$build" > /dev/null || exit 1
     fi
     GTEST_OUTPUT=json:$OUT/unit-$build.json \
         exec "$build/test/gtest/gtest_rc_gdr") 2>&1 | tee "$OUT/unit-$build" |
        grep -E '^\[  (FAILED|PASSED) |^\[ +FAILED +\]' || true
    tally_gtest "$OUT/unit-$build.json"

    if [ -z "$cuda" ]; then
        RELEASE_BUILDS+=("$build")
        echo "== tier 5: $name: loading checks on the host"
        RC_GDR_BUILD="$build" test/host/run.sh 2>&1 | tee "$OUT/host-$build"
        tally_plain "$OUT/host-$build"
    fi

    [ "$RUN_VM" = 1 ] && [ -n "$guest_est" ] || return
    over_budget "the soft-RoCE guest on $name" "$guest_est" && return
    echo "== tier 5: $name: the soft-RoCE guest${filter:+ ($filter)}"
    RC_GDR_BUILD="$build" RC_GDR_TEST_FILTER="$filter" \
        contrib/rxe-vm.sh --timeout 2400 -- test/rxe/run.sh 2>&1 |
        tee "$OUT/rxe-$build"
    tally_counts "$OUT/rxe-$build"
}

for v in $RELEASES; do
    if [ "$v" = 1.22.0 ]; then
        tier5_release "$v" "" 1000
    elif [[ "$CHEAP_RELEASES" == *" $v "* ]]; then
        tier5_release "$v" "" ""
    else
        # rc_gdr listed, UCT put/get/am, UCP tag/put/get, Open MPI verified
        tier5_release "$v" '^(ucx_info_lists_rc_gdr|release\.|perftest_uct_(put_bw_zcopy|get_zcopy|am_lat)|perftest_ucp_(tag_bw|put_bw|get)|mpi_2ranks_p2p_and_rma_verified)' 400
    fi
done
if [ ${#RELEASE_BUILDS[@]} -gt 0 ]; then
    echo "== tier 5: every module in every other release"
    test/host/cross.sh build "${RELEASE_BUILDS[@]}" 2>&1 | tee "$OUT/cross"
    tally_plain "$OUT/cross"
fi
if [[ " $RELEASES " == *" 1.22.0 "* ]]; then
    tier5_release --cuda 1.22.0 \
        '^(ucx_info_lists_rc_gdr|memtypes\.cuda|gpu_emulated_info|(gpu|gpu_emulated|gpu_lanes)\.|bounce\.[a-z_]+/dmabuf_refused)' 300
fi

# Tier 8 after tier 5's releases, before their own UCT suites (the longest
# steps, the first the time budget trims): the self-test of its verdict,
# then the two-guest run (WIRE_S: its length on this 2-core host, loaded:
# 265-283 s on 2026-12-05, at load 7-11, with a margin)
WIRE_S=420
if [ "${RC_GDR_WIRE:-1}" = 1 ]; then
    echo "== tier 8: the wire: its verdict's self-test (test/wire/verdict_test.sh)"
    test/wire/verdict_test.sh 2>&1 | tee "$OUT/wire-verdict"
    tally_plain "$OUT/wire-verdict"
    if [ "$RUN_VM" = 1 ] &&
       ! over_budget "tier 8: the wire (two soft-RoCE guests)" "$WIRE_S"; then
        echo "== tier 8: the wire: rc_gdr beside rc_verbs between two" \
             "soft-RoCE guests, loss, a 2 s cut, a host killed" \
             "(test/wire/run.sh --ci; EMULATED)"
        t0=$(date +%s)
        test/wire/run.sh --ci --out "$OUT/wire" 2>&1 | tee "$OUT/wire.out"
        tally_plain "$OUT/wire.out"
        echo "== tier 8: the wire took $(( $(date +%s) - t0 )) s"
    fi
fi

# Last, as they are long: the releases' own UCT suites, 1.22.0's first, then
# 1.16.0's and 1.19.1's (rc_verbs from the baseline of that release,
# contrib/conformance/rc_verbs-baseline-VERSION.tsv, where it holds), each
# skipped when it would end past the budget.
declare -A OWN_SUITES_S=([1.22.0]=1800 [1.16.0]=1200 [1.19.1]=1200)
if [ "$RUN_VM" = 1 ] && [ "${RC_GDR_CONFORMANCE:-1}" = 1 ]; then
    for v in 1.22.0 1.16.0 1.19.1; do
        [[ " ${RELEASE_BUILDS[*]} " == *" build-$v "* ]] &&
            [ -f "contrib/conformance/rc_verbs-baseline-$v.tsv" ] || continue
        over_budget "UCX $v's own UCT suites" "${OWN_SUITES_S[$v]}" && continue
        echo "== tier 5: UCX $v: conformance, its own UCT suites (CI subset)" \
             "in the guest, rc_gdr beside rc_verbs"
        RC_GDR_BUILD=build-$v contrib/conformance.sh --core --ucx "$v" \
            --no-build 2>&1 | tee "$OUT/conformance-$v"
        tally_counts "$OUT/conformance-$v"
    done
fi

rm -rf "$OUT"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
