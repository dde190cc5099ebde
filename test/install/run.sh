#!/bin/bash
#
# Tier 7: the install, as a site runs it (README "Install on a cluster").
#   - `make distcheck`: the tarball builds, tests and installs out of tree
#     against the UCX this build was configured with;
#   - the Debian package (contrib/packaging/debian) built from this tree
#     for the distribution's UCX, then installed into a clean soft-RoCE
#     guest (contrib/rxe-vm.sh: the host's root read-only, writes in the
#     guest's own overlay) with nothing of the build tree in the
#     environment: the package's environment file alone makes ucx_info,
#     ucx_perftest (UCT and UCP) and 2-rank Open MPI use rc_gdr; removing
#     the package leaves none of its files and no rc_gdr in UCX.
# From the repository root, after contrib/build.sh (Debian's UCX, build/).
# Prints one PASS / FAIL / SKIP line per check and "N passed, N failed,
# N skipped"; exits non-zero on any failure.
#
# Usage: test/install/run.sh [--no-distcheck] [--no-vm]
#        test/install/run.sh --inside DEB   (in the guest; run by the above)
#
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
B=${RC_GDR_BUILD:-build}
LOG=$(mktemp -d /tmp/rc_gdr_install.XXXXXX)
trap 'rm -rf "$LOG"' EXIT
. contrib/lib/run_tests.sh

# ------------------------------------------------------------- in the guest

# Every check runs in an environment with nothing of the build tree: a
# login-like PATH, then the package's environment file when asked
clean_env() { # [--with-rc-gdr] CMD...
    local src=":"
    if [ "$1" = --with-rc-gdr ]; then
        src=". /usr/share/rc_gdr/rc_gdr.sh"
        shift
    fi
    env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME="${HOME:-/root}" LOG="$LOG" ROOT="$ROOT" \
        bash -c "$src && \"\$@\"" clean_env "$@"
}

check_no_rc_gdr_before() {
    [ ! -e /usr/share/rc_gdr ] || { echo "/usr/share/rc_gdr exists"; return 1; }
    clean_env ucx_info -d > "$LOG/d0" 2>&1
    ! grep 'Transport: rc_gdr' "$LOG/d0"
}

check_dpkg_install() {
    dpkg -i "$DEB" && dpkg -L rc-gdr > "$LOG/files" &&
        grep '/libuct_ib_gdr\.so$' "$LOG/files" &&
        grep '^/usr/share/rc_gdr/rc_gdr\.sh$' "$LOG/files" &&
        grep '^/usr/bin/rc_gdr_info$' "$LOG/files"
}

check_ucx_info() {
    clean_env --with-rc-gdr ucx_info -c > "$LOG/c" 2>&1
    grep '^UCX_RC_GDR_TX_QUEUE_LEN=' "$LOG/c" || return 1
    clean_env --with-rc-gdr ucx_info -d > "$LOG/d" 2>&1
    for dev in rxe0:1 rxe1:1; do
        grep -A1 'Transport: rc_gdr$' "$LOG/d" | grep "Device: $dev$" ||
            { echo "ucx_info -d lists no rc_gdr on $dev"; return 1; }
    done
}

check_rc_gdr_info() {
    clean_env --with-rc-gdr rc_gdr_info > "$LOG/info" 2>&1
    local rc=$?
    head -20 "$LOG/info"
    [ "$rc" = 0 ] && grep rxe0 "$LOG/info"
}

# ucx_perftest between two processes, rc_gdr only (UCT: -x rc_gdr; UCP:
# UCX_TLS without rc_verbs, and rc_gdr must have posted work)
perftest() { # uct|ucp PORT ARGS...
    local level=$1 port=$2 rc
    shift 2
    local -a srv=(ucx_perftest -p "$port") cli=(ucx_perftest -p "$port"
                                               127.0.0.1 "$@")
    local tls=""
    if [ "$level" = uct ]; then
        srv+=(-x rc_gdr -d rxe0:1)
        cli+=(-x rc_gdr -d rxe1:1)
    else
        tls="UCX_TLS=rc_gdr,ud_verbs:aux,self UCX_LOG_LEVEL=info"
    fi
    clean_env --with-rc-gdr env $tls UCX_NET_DEVICES=rxe0:1 \
        timeout 120 "${srv[@]}" > "$LOG/srv.$port" 2>&1 &
    local server=$!
    wait_listen "$port" || return 1
    clean_env --with-rc-gdr env $tls UCX_NET_DEVICES=rxe1:1 \
        timeout 100 "${cli[@]}" > "$LOG/cli.$port" 2>&1
    rc=$?
    wait "$server"
    grep -E '^Final:|rc_gdr:' "$LOG/cli.$port"
    [ "$rc" = 0 ] && grep -q '^Final:' "$LOG/cli.$port" || return 1
    [ "$level" = uct ] ||
        grep -Eq 'rc_gdr: rxe1:1 closed: [1-9][0-9]* work requests' \
            "$LOG/cli.$port"
}

# Two ranks with the package's environment: its OMPI_MCA_ variables let
# pml ucx take rc_gdr's devices; the data are checked byte for byte
check_mpi() {
    local out=$LOG/mpi.out rc
    clean_env --with-rc-gdr timeout 300 mpirun --allow-run-as-root \
        --oversubscribe -np 2 --mca pml ucx --mca btl ^openib,ofi,uct \
        --mca osc ucx -x UCX_TLS=rc_gdr,ud_verbs:aux,self \
        -x UCX_LOG_LEVEL=info -x LD_PRELOAD -x OMPI_MCA_pml_ucx_tls \
        -x OMPI_MCA_pml_ucx_devices \
        "$ROOT/$B/test/mpi/mpi_verify" mpi > "$out" 2>&1
    rc=$?
    grep -E '^(ok|BAD|verification)|rc_gdr:' "$out"
    [ "$rc" = 0 ] && grep -q '^verification: PASSED' "$out" &&
        grep -Eq 'rc_gdr: rxe[01]:1 closed: [1-9][0-9]* work requests' "$out"
}

check_dpkg_remove() {
    local left
    dpkg -r rc-gdr || return 1
    left=$(while read -r f; do
               [ -f "$f" ] && echo "$f"
           done < "$LOG/files")
    [ -z "$left" ] || { echo "left behind: $left"; return 1; }
    clean_env ucx_info -d > "$LOG/d1" 2>&1
    ! grep 'Transport: rc_gdr' "$LOG/d1"
}

inside() {
    DEB=$1
    . contrib/lib/wait_listen.sh
    RESULT_TAG="soft-RoCE guest, installed package"
    run_test no_rc_gdr_before_install check_no_rc_gdr_before
    run_test dpkg_install check_dpkg_install
    run_test ucx_info_lists_rc_gdr_config_and_devices check_ucx_info
    run_test rc_gdr_info_runs check_rc_gdr_info
    run_test perftest_uct_put_bw_zcopy perftest uct 15100 -t put_bw \
        -D zcopy -s 65536 -n 200
    run_test perftest_uct_am_lat perftest uct 15101 -t am_lat -s 8 -n 200
    run_test perftest_ucp_tag_bw perftest ucp 15102 -t tag_bw -s 65536 -n 100
    if [ -x "$ROOT/$B/test/mpi/mpi_verify" ] && command -v mpirun > /dev/null
    then
        run_test mpi_2ranks_byte_exact_with_package_env check_mpi
    else
        run_skip mpi_2ranks_byte_exact_with_package_env \
            "no $B/test/mpi/mpi_verify or mpirun"
    fi
    run_test dpkg_remove_leaves_nothing check_dpkg_remove
    run_tests_summary
}

# --------------------------------------------------------------- the host

build_deb() {
    local d
    d=$(mktemp -d /tmp/rc_gdr_deb.XXXXXX)
    mkdir "$d/rc-gdr-src"
    git archive HEAD | tar -x -C "$d/rc-gdr-src" &&
        cp -a contrib/packaging/debian "$d/rc-gdr-src/" &&
        (cd "$d/rc-gdr-src" &&
         DEB_BUILD_OPTIONS="nocheck parallel=2" dpkg-buildpackage -us -uc -b \
             -d) > "$LOG/deb-build" 2>&1 || {
            tail -30 "$LOG/deb-build"
            return 1
        }
    DEB=$(ls "$d"/rc-gdr_*.deb 2>/dev/null | head -n1)
    [ -n "$DEB" ] || { echo "no .deb in $d"; return 1; }
    echo "$DEB"
}

host() {
    local distcheck=1 vm=1 line
    while [ $# -gt 0 ]; do
        case $1 in
        --no-distcheck) distcheck=0 ;;
        --no-vm)        vm=0 ;;
        *) echo "usage: $0 [--no-distcheck] [--no-vm]" >&2; exit 2 ;;
        esac
        shift
    done
    if [ "$distcheck" = 1 ]; then
        run_test make_distcheck make -C "$B" distcheck
    fi
    DEB=""
    if build_deb > "$LOG/deb" 2>&1; then
        DEB=$(tail -n1 "$LOG/deb")
        echo "PASS debian_package_builds ($(basename "$DEB"))"
        PASSED=$((PASSED + 1))
    else
        echo "FAIL debian_package_builds"
        sed 's/^/    | /' "$LOG/deb" | tail -30
        FAILED=$((FAILED + 1))
    fi
    if [ -n "$DEB" ] && [ "$vm" = 1 ]; then
        # the guest sees the host's /tmp: the package and this script's log
        contrib/rxe-vm.sh --timeout 900 -- env -u LD_PRELOAD \
            -u UCX_PLUGIN_PATH "$0" --inside "$DEB" > "$LOG/guest" 2>&1
        grep -E '^(PASS|FAIL|SKIP) |^    \| ' "$LOG/guest"
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' \
               "$LOG/guest" | tail -n1)
        if [ -n "$line" ]; then
            # shellcheck disable=SC2046  # three numbers
            set -- $(echo "$line" | awk '{print $1, $3, $5}')
            PASSED=$((PASSED + $1)) FAILED=$((FAILED + $2))
            SKIPPED=$((SKIPPED + $3))
        else
            echo "FAIL guest_install_checks (no result line)"
            tail -20 "$LOG/guest" | sed 's/^/    | /'
            FAILED=$((FAILED + 1))
        fi
        rm -rf "$(dirname "$DEB")"
    elif [ -n "$DEB" ]; then
        rm -rf "$(dirname "$DEB")"
    fi
    run_tests_summary
}

if [ "${1:-}" = --inside ]; then
    inside "$2"
else
    host "$@"
fi
