#!/bin/bash
#
# Tier 1b: loading checks on the host (no RDMA, no GPU needed), in the UCX
# release the build is for (RC_GDR_BUILD, default build/; its ucx.env says
# which). Prints "PASS name" / "FAIL name" / "SKIP name: why" per test and
# "N passed, N failed, N skipped".
#
set -uo pipefail

cd "$(dirname "$0")/../.."
B=$(cd "${RC_GDR_BUILD:-build}" && pwd)
PLUGIN=$B/src/uct/ib_gdr/.libs/libuct_ib_gdr.so
FAKE_UCP=$B/test/mocks/ucx_version_fake.so
RC_GDR_UCX_VERSION=""
RC_GDR_UCX_BINDIR=""
RC_GDR_UCX_LOADER=""
# shellcheck disable=SC1091
. "$B/ucx.env"
UCX_VERSION=$RC_GDR_UCX_VERSION
if [ -n "$RC_GDR_UCX_BINDIR" ]; then
    export PATH="$RC_GDR_UCX_BINDIR:$PATH"
    export LD_LIBRARY_PATH="$RC_GDR_UCX_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# How this release loads the module (configure looked): UCX_PLUGIN_PATH
# from 1.22, else preload
if [ -z "$RC_GDR_UCX_LOADER" ]; then
    case "$UCX_VERSION" in
    1.1[0-9].*|1.2[01].*) RC_GDR_UCX_LOADER=preload ;;
    *)                    RC_GDR_UCX_LOADER=plugin-path ;;
    esac
fi
case "$RC_GDR_UCX_LOADER" in
preload) LOAD=(env LD_PRELOAD="$PLUGIN") ;;
*)       LOAD=(env UCX_PLUGIN_PATH="$(dirname "$PLUGIN")") ;;
esac
# A release that is not this build's, for the refusal checks
OTHER_UCX=1.18.1
[ "$UCX_VERSION" != "$OTHER_UCX" ] || OTHER_UCX=1.17.0
LOG=$(mktemp -d /tmp/rc_gdr_host.XXXXXX)
PASSED=0
FAILED=0
SKIPPED=0
# A test that cannot run here exits with this, its last line the reason
SKIP_RC=77

run_test() {
    local name=$1 rc=0; shift
    "$@" > "$LOG/$name.log" 2>&1 || rc=$?
    if [ "$rc" = 0 ]; then
        echo "PASS $name"
        PASSED=$((PASSED + 1))
    elif [ "$rc" = "$SKIP_RC" ]; then
        echo "SKIP $name: $(tail -n1 "$LOG/$name.log")"
        SKIPPED=$((SKIPPED + 1))
    else
        echo "FAIL $name"
        sed 's/^/    | /' "$LOG/$name.log" | tail -30
        FAILED=$((FAILED + 1))
    fi
}

# Built for this UCX: registered, its configuration is listed.
test_registers_in_matching_ucx() {
    ucx_info -v | grep "Library version: $UCX_VERSION\|Version $UCX_VERSION" &&
        "${LOAD[@]}" ucx_info -c | grep '^UCX_RC_GDR_TX_QUEUE_LEN='
}

# 1.22 on: found through UCX_PLUGIN_PATH under its plugin name, no preload.
test_plugin_path_alone() {
    if [ "$RC_GDR_UCX_LOADER" = preload ]; then
        echo "UCX $UCX_VERSION has no UCX_PLUGIN_PATH"
        return 0
    fi
    [ -z "${LD_PRELOAD:-}" ] &&
        [ -e "$(dirname "$PLUGIN")/libuct_rcgdr.so.0" ] &&
        UCX_PLUGIN_PATH=$(dirname "$PLUGIN") \
            ucx_info -c 2>&1 | grep '^UCX_RC_GDR_TX_QUEUE_LEN='
}

# No UCX version test outside the glue (rc_gdr_glue*): the rest of the
# sources compiles unchanged against every release.
test_no_release_test_outside_glue() {
    local hits
    hits=$(grep -rnE 'RC_GDR_UCX_(MAJOR|MINOR|PATCH|VERSION)|UCS_VERSION|UCT_VERSION|UCT_API_(MAJOR|MINOR|VERSION)|UCP_API_(MAJOR|MINOR|VERSION)|^\s*#\s*(el)?if.*UCX' \
               src test --include='*.c' --include='*.h' --include='*.cc' \
               --include='*.inl' | grep -v '/rc_gdr_glue[^/]*:')
    [ -z "$hits" ] || { echo "release tests outside the glue:"; echo "$hits"; return 1; }
    # and the same search finds the glue's own
    grep -qE 'RC_GDR_UCX_MINOR' src/uct/ib_gdr/rc_gdr_glue_version.c || return 1
    # ucs_align_* moved between releases: its users take it from the glue
    hits=$(grep -rlE 'ucs_align_' src test --include='*.c' --include='*.h' \
               --include='*.cc' | grep -v '/rc_gdr_glue' |
           xargs -r grep -LE 'rc_gdr_glue(_math)?\.h|rc_gdr_(stage|md|iface|ep)\.h')
    [ -z "$hits" ] || { echo "ucs_align_* without rc_gdr_glue_math.h:"; echo "$hits"; return 1; }
}

# Another UCX release (faked through the version the loader sees): a clear
# error, no registration, no crash.
test_refuses_other_ucx() {
    local out rc
    out=$(LD_PRELOAD=$FAKE_UCP:$PLUGIN RC_GDR_FAKE_UCX_VERSION=$OTHER_UCX \
          ucx_info -c 2>&1); rc=$?
    echo "$out" | grep -v '^UCX_' | head -5
    [ "$rc" = 0 ] &&
        grep -q "built for UCX $UCX_VERSION but this process runs UCX $OTHER_UCX" <<<"$out" &&
        ! grep -q '^UCX_RC_GDR_' <<<"$out"
}

test_refuses_other_patch_release() {
    local other=${UCX_VERSION%.*}.$(( ${UCX_VERSION##*.} + 1 ))
    LD_PRELOAD=$FAKE_UCP:$PLUGIN RC_GDR_FAKE_UCX_VERSION=$other \
        ucx_info -c 2>&1 |
        grep "runs UCX $other; the transport is not registered"
}

# No verbs device and no CUDA driver here: the module loads, lists nothing,
# and UCX still works.
test_loads_without_hardware() {
    "${LOAD[@]}" ucx_info -d > /dev/null &&
        "${LOAD[@]}" ucx_info -v | grep "Library version: $UCX_VERSION\|Version $UCX_VERSION"
}

test_info_tool_without_hardware() {
    local rc
    "$B/src/tools/rc_gdr_info"; rc=$?
    [ "$rc" = 0 ] || return 1
    "$B/src/tools/rc_gdr_info" --require-gdr; rc=$?
    [ "$rc" = 2 ]
}

# The limits on registrations are evidence: RLIMIT_MEMLOCK, what a refused
# GPU registration does, and a GPU's BAR1 (here from a synthetic sysfs tree,
# no CUDA driver, no NVML: PCI BAR 1's size; unknown, with the reason,
# where the tree has none).
test_info_tool_limits() {
    local root out dev=0000:41:00.0
    root=$(mktemp -d /tmp/rc_gdr_sysfs.XXXXXX) || return 1
    mkdir -p "$root/bus/pci/devices/$dev" "$root/bus/pci/devices/0000:42:00.0"
    echo 0x10de > "$root/bus/pci/devices/$dev/vendor"
    echo 0x030200 > "$root/bus/pci/devices/$dev/class"
    printf '%s\n' \
        '0x00000000a0000000 0x00000000a0ffffff 0x0000000000040200' \
        '0x0000380000000000 0x000038000fffffff 0x000000000014220c' \
        '0x0000000000000000 0x0000000000000000 0x0000000000000000' \
        > "$root/bus/pci/devices/$dev/resource"
    echo 0x10de > "$root/bus/pci/devices/0000:42:00.0/vendor"
    echo 0x030200 > "$root/bus/pci/devices/0000:42:00.0/class"
    out=$(RC_GDR_CUDA_LIBRARY=/nonexistent/libcuda.so.1 \
          "$B/src/tools/rc_gdr_info" --sysfs "$root" 2>&1)
    echo "$out"
    grep -q '^Limits: RLIMIT_MEMLOCK ' <<<"$out" &&
        grep -q 'refuses at run time.*the bounce lane carries it' <<<"$out" &&
        grep -q '^  BAR1 256M (PCI BAR 1 in sysfs' <<<"$out" &&
        grep -q '^  BAR1 unknown (.*resource' <<<"$out" &&
        UCX_RC_GDR_BOUNCE=no "$B/src/tools/rc_gdr_info" --sysfs "$root" |
            grep -q 'refuses at run time.*fails' &&
        RC_GDR_CUDA_LIBRARY=/nonexistent/libcuda.so.1 \
            "$B/src/tools/rc_gdr_info" --sysfs "$root" --json |
            python3 -c 'import json, sys
d = json.load(sys.stdin)
assert d["gpus"][0]["bar1"]["total"] == 256 << 20, d["gpus"][0]
assert d["gpus"][1]["bar1"]["total"] is None, d["gpus"][1]
assert d["runtime_fallback"] == "bounce" and "memlock" in d'
    local rc=$?
    rm -rf "$root"
    return $rc
}

# The registration cache's knobs are in UCX's configuration table.
test_rcache_knobs_listed() {
    local out
    out=$(LD_PRELOAD=$PLUGIN ucx_info -c) || return 1
    echo "$out" | grep '^UCX_RC_GDR_RCACHE' &&
        grep -q '^UCX_RC_GDR_RCACHE=try$' <<<"$out" &&
        grep -q '^UCX_RC_GDR_RCACHE_MAX_SIZE=' <<<"$out" &&
        grep -q '^UCX_RC_GDR_RCACHE_MAX_REGIONS=' <<<"$out"
}

# bench-rc --summarize: a run cut by a time limit still gives its verdict,
# from its progress lines; the round cut in its middle is left out.
test_bench_summarize_cut_run() {
    local out
    printf '%s\n' \
        '== rc_gdr vs rc_verbs, UCT ucx_perftest, client and server on tnic1:1' \
        '   STAND-IN NIC (test/tnic), native' '' \
        '-- get zcopy 1M: ucx_perftest -t get -D zcopy -s 1048576 -n 6000' \
        '   round 1 rc_verbs: 100' '   round 1 rc_gdr: 103' \
        '   round 2 rc_gdr: 95'    '   round 2 rc_verbs: 100' \
        '   round 3 rc_verbs: 100' '   round 3 rc_gdr: 101' \
        '   round 4 rc_gdr: 99'    '   round 4 rc_verbs: 100' \
        '   round 5 rc_verbs: 100' '   round 5 rc_gdr: 105' \
        '   round 6 rc_gdr: 97'    '   round 6 rc_verbs: 100' \
        '   round 7 rc_verbs: 200' '   round 7 rc_gdr: 200' \
        '   round 8 rc_gdr: 10' > "$LOG/cut.txt"
    out=$(contrib/bench-rc.sh --summarize "$LOG/cut.txt") || return 1
    echo "$out"
    # 7 rounds: ratios 0.95-1.05, median 1.0; the interval is the range
    grep -Eq '^get zcopy 1M +MB/s +100 +101 +1\.000 +\[0\.950, 1\.050\] +>= 1\.00 +met \(7 rounds\)$' <<<"$out" &&
        grep -q 'round 8 has one transport.s value only, left out' <<<"$out" &&
        grep -Eq '^  get zcopy 1M +10000\.0 usec/op$' <<<"$out" &&
        ! contrib/bench-rc.sh --summarize "$LOG/no-such-log" >/dev/null 2>&1
}

# UCX_MEM_EVENTS=no (what runs under valgrind set): the memory domain opens
# over the stand-in verbs device, host memory uncached, said in one line.
test_md_without_memory_events() {
    UCX_MEM_EVENTS=no "$B/test/gtest/gtest_rc_gdr" \
        --gtest_filter='md.opens_without_memory_events:md.stale*:md.host_access*'
}

# make install puts every file where this UCX finds it, and make uninstall
# takes every one away again. Once into a prefix of its own (what a site
# does): the installed environment file registers the installed module in
# this UCX, the modulefile sets the same, rc_gdr_info runs from bindir; and
# once into a DESTDIR (what a package build does).
test_install_uninstall() {
    local d p mdir rc=0 files want f
    d=$(mktemp -d /tmp/rc_gdr_install.XXXXXX) || return 1
    p=$d/prefix
    mdir=$p/lib
    [ "$RC_GDR_UCX_LOADER" = preload ] || mdir=$p/lib/ucx
    make -C "$B" install prefix="$p" uctmoduledir="$mdir" \
        > "$d/install.log" 2>&1 || { tail -20 "$d/install.log"; return 1; }
    want="$p/bin/rc_gdr_info $mdir/libuct_ib_gdr.so
          $p/share/rc_gdr/rc_gdr.sh $p/share/rc_gdr/openmpi-mca-params.conf
          $p/share/rc_gdr/modulefiles/rc_gdr/$(sed -n 's/^PACKAGE_VERSION = //p' "$B/Makefile")"
    [ "$RC_GDR_UCX_LOADER" = preload ] || want="$want $mdir/libuct_rcgdr.so.0"
    for f in $want; do
        [ -e "$f" ] || { echo "not installed: $f"; rc=1; }
    done
    (cd "$d" && find prefix ! -type d | sort)
    # the environment file alone registers the installed module
    (unset LD_PRELOAD UCX_PLUGIN_PATH
     . "$p/share/rc_gdr/rc_gdr.sh"
     echo "LD_PRELOAD=${LD_PRELOAD:-} UCX_PLUGIN_PATH=${UCX_PLUGIN_PATH:-}"
     ucx_info -c | grep '^UCX_RC_GDR_TX_QUEUE_LEN=' &&
         [ "$(command -v rc_gdr_info)" = "$p/bin/rc_gdr_info" ] &&
         rc_gdr_info > /dev/null) || { echo "not registered"; rc=1; }
    # the modulefile sets what the environment file does
    if command -v tclsh > /dev/null; then
        printf '%s\n' 'proc module-whatis {args} {}' 'proc conflict {args} {}' \
            'proc setenv {n v} {puts "$n=$v"}' \
            'proc prepend-path {n v} {puts "$n=$v"}' \
            "source \"$p/share/rc_gdr/modulefiles/rc_gdr/$(sed -n 's/^PACKAGE_VERSION = //p' "$B/Makefile")\"" |
            tclsh > "$d/module.out" || rc=1
        cat "$d/module.out"
        if [ "$RC_GDR_UCX_LOADER" = preload ]; then
            grep -qx "LD_PRELOAD=$mdir/libuct_ib_gdr.so" "$d/module.out" || rc=1
        else
            grep -qx "UCX_PLUGIN_PATH=$mdir" "$d/module.out" || rc=1
        fi
        grep -qx "OMPI_MCA_pml_ucx_tls=any" "$d/module.out" || rc=1
    fi
    make -C "$B" uninstall prefix="$p" uctmoduledir="$mdir" \
        >> "$d/install.log" 2>&1 || rc=1
    files=$(find "$p" ! -type d)
    [ -z "$files" ] || { echo "left after uninstall:"; echo "$files"; rc=1; }
    # into a DESTDIR, as a package build installs
    make -C "$B" install DESTDIR="$d/dest" >> "$d/install.log" 2>&1 &&
        [ -n "$(find "$d/dest" -name libuct_ib_gdr.so)" ] &&
        [ -n "$(find "$d/dest" -name rc_gdr.sh)" ] &&
        make -C "$B" uninstall DESTDIR="$d/dest" >> "$d/install.log" 2>&1 ||
        { tail -20 "$d/install.log"; rc=1; }
    files=$(find "$d/dest" ! -type d)
    [ -z "$files" ] || { echo "left after uninstall from DESTDIR:"; echo "$files"; rc=1; }
    rm -rf "$d"
    return $rc
}

# Tier 5 of contrib/test.sh in a clone without the release tarballs: those
# missing are named and skipped, unless the user named them
test_releases_without_sources() {
    local deps
    deps=$(mktemp -d /tmp/rc_gdr_deps.XXXXXX) || return 1
    touch "$deps/ucx-1.16.0.tar.gz"
    # shellcheck disable=SC1091
    . contrib/lib/releases.sh
    release_sources "$deps" "" 1.22.0 1.16.0 1.18.1
    echo "default: present '$RELEASES_PRESENT', missing '$RELEASES_MISSING'"
    [ "$RELEASES_PRESENT" = 1.16.0 ] &&
        [ "$RELEASES_MISSING" = "1.22.0 1.18.1" ] || { rm -rf "$deps"; return 1; }
    release_sources "$deps" 1 1.22.0 1.16.0
    echo "named: present '$RELEASES_PRESENT', missing '$RELEASES_MISSING'"
    rm -rf "$deps"
    [ "$RELEASES_PRESENT" = "1.22.0 1.16.0" ] && [ -z "$RELEASES_MISSING" ] &&
        grep -q 'release_sources "$DEPS"' contrib/test.sh
}

# The RPM spec (contrib/packaging/rc_gdr.spec) builds a package from this
# build's dist tarball (rpmbuild -bb: --nodeps, the UCX here need not be an
# RPM; --nocheck, the other tiers run the tests) that holds the module,
# rc_gdr_info, the environment file, the modulefile and Open MPI's
# parameters, and requires exactly this UCX. Skipped without rpmbuild, and
# for a build against another UCX than the system's (the spec packages the
# system's).
test_rpm_package() {
    local d flags version sys_ucx f want list rc=0
    local -a defs=()

    command -v rpmbuild >/dev/null || {
        echo "no rpmbuild (Debian: apt-get install rpm)"; return $SKIP_RC; }
    sys_ucx=$(pkg-config --modversion ucx 2>/dev/null || true)
    [ "$sys_ucx" = "$UCX_VERSION" ] || {
        echo "this build is for UCX $UCX_VERSION; the spec packages the" \
             "system's UCX (${sys_ucx:-none})"; return $SKIP_RC; }

    flags=$(sed -n 's/^RC_GDR_DISTCHECK_FLAGS = //p' "$B/Makefile")
    version=$(sed -n 's/^PACKAGE_VERSION = //p' "$B/Makefile")
    for f in $flags; do
        case $f in
        --with-ucx-src=*)   defs+=(--define "rc_gdr_ucx_src ${f#*=}") ;;
        --with-ucx-build=*) defs+=(--define "rc_gdr_ucx_build ${f#*=}") ;;
        --with-cuda=*)      defs+=(--define "cuda_home ${f#*=}") ;;
        esac
    done
    grep -qx "Version: *$version" contrib/packaging/rc_gdr.spec || {
        echo "rc_gdr.spec's Version is not the package's ($version)"; return 1; }

    d=$(mktemp -d /tmp/rc_gdr_rpm.XXXXXX) || return 1
    mkdir -p "$d/SOURCES"
    make -C "$B" dist > "$d/dist.log" 2>&1 &&
        mv "$B/rc_gdr-$version.tar.gz" "$d/SOURCES/" ||
        { tail -20 "$d/dist.log"; rm -rf "$d"; return 1; }
    rpmbuild -bb --nodeps --nocheck --define "_topdir $d" "${defs[@]}" \
        contrib/packaging/rc_gdr.spec > "$d/rpmbuild.log" 2>&1 ||
        { tail -30 "$d/rpmbuild.log"; rm -rf "$d"; return 1; }

    f=$(find "$d/RPMS" -name "rc_gdr-$version-*.rpm")
    list=$(rpm -qpl "$f")
    echo "$list"
    for want in '/libuct_ib_gdr\.so$' '/bin/rc_gdr_info$' \
                '/rc_gdr/rc_gdr\.sh$' "/rc_gdr/modulefiles/rc_gdr/$version\$" \
                '/rc_gdr/openmpi-mca-params\.conf$'; do
        grep -q "$want" <<<"$list" || { echo "missing: $want"; rc=1; }
    done
    rpm -qp --requires "$f" | grep -x "ucx = $UCX_VERSION.*" ||
        { echo "does not require ucx = $UCX_VERSION"; rc=1; }
    rm -rf "$d"
    return $rc
}

run_test module_registers_in_matching_ucx     test_registers_in_matching_ucx
run_test module_found_by_plugin_path_alone    test_plugin_path_alone
run_test no_release_test_outside_glue         test_no_release_test_outside_glue
run_test module_refuses_other_ucx_release     test_refuses_other_ucx
run_test module_refuses_other_patch_release   test_refuses_other_patch_release
run_test module_loads_without_rdma_or_cuda    test_loads_without_hardware
run_test info_tool_says_why_without_hardware  test_info_tool_without_hardware
run_test info_tool_limits_as_evidence         test_info_tool_limits
run_test rcache_knobs_in_ucx_config           test_rcache_knobs_listed
run_test bench_rc_summarizes_a_cut_run        test_bench_summarize_cut_run
run_test md_opens_without_memory_events       test_md_without_memory_events
run_test install_uninstall_where_ucx_finds_it test_install_uninstall
run_test tier5_skips_releases_without_sources test_releases_without_sources
run_test rpm_spec_builds_the_package          test_rpm_package

rm -rf "$LOG"
echo "$PASSED passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
