# shellcheck shell=bash
# Sourced by the benchmarks that compare rc_gdr with UCX's own rc_verbs
# (contrib/bench-rc.sh, contrib/bench-callgrind.sh): the one set-up of
# where they run (an rxe-vm guest, or natively on the stand-in NIC) and of
# what each transport's processes load. Needs ROOT (the repository) and
# die (contrib/lib/cli.sh).
#
# bench_guest_run [RXE_VM_OPTIONS...] -- COMMAND...
#   Boots one contrib/rxe-vm.sh guest that runs COMMAND from the repository
#   root, and exits with rxe-vm.sh's status (that of COMMAND; 124 timeout,
#   125 VM failure).
# bench_guest_device DEVICE
#   In a guest: dies unless DEVICE's verbs device (DEV:PORT) is here.
# bench_guest_tnic BUILD FABRIC
#   Natively: the stand-in NIC of BUILD (BUILD/test/tnic/lib) first in
#   LD_LIBRARY_PATH, on a fabric of the caller's own (RC_GDR_TNIC_FABRIC,
#   whose /dev/shm/rc_gdr_tnic.FABRIC.* files the caller removes at its
#   end); TNIC_LIB is the library directory. Returns 1 when BUILD has no
#   stand-in NIC (make check TESTS= builds it).
# bench_guest_preloads BUILD
#   Each transport's environment, as an 'env' prefix: ENV_rc_verbs runs the
#   stock UCX only (whatever LD_PRELOAD the caller had, minus rc_gdr),
#   ENV_rc_gdr with contrib/env.sh's preload on top; then no run of rc_verbs
#   can be affected by the module, and both servers load what their client
#   loads (the server takes -x from the client). Sets BASE_PRELOAD and
#   GDR_PRELOAD (the two LD_PRELOAD values) and sources contrib/env.sh.

bench_guest_run() {
    local -a opts=()
    local rc=0
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        opts+=("$1")
        shift
    done
    shift
    (cd "$ROOT" && contrib/rxe-vm.sh "${opts[@]}" -- "$@") || rc=$?
    exit "$rc"
}

bench_guest_device() {
    [ -e /sys/class/infiniband/"${1%:*}" ] ||
        die "no ${1%:*} here: run on the host (without --inside), or in contrib/rxe-vm.sh"
}

bench_guest_tnic() {
    local build=$1
    [ -f "$build/test/tnic/lib/libibverbs.so.1" ] || return 1
    TNIC_LIB=$(cd "$build/test/tnic/lib" && pwd) || return 1
    export LD_LIBRARY_PATH=$TNIC_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export RC_GDR_TNIC_FABRIC=$2
}

bench_guest_preloads() {
    local build=$1
    # env.sh prepends the module once; strip it first if it was already set.
    BASE_PRELOAD=$(tr ':' '\n' <<<"${LD_PRELOAD:-}" |
                   grep -v '/libuct_ib_gdr\.so$' | paste -sd: || true)
    # shellcheck source=contrib/env.sh
    . "$ROOT/contrib/env.sh" "$build"
    GDR_PRELOAD=${LD_PRELOAD:-}   # none where the UCX scans UCX_PLUGIN_PATH
    # shellcheck disable=SC2034  # ENV_* are read by the caller, by name
    if [ -n "$BASE_PRELOAD" ]; then
        ENV_rc_verbs=(env "LD_PRELOAD=$BASE_PRELOAD")
    else
        ENV_rc_verbs=(env -u LD_PRELOAD)
    fi
    # shellcheck disable=SC2034
    ENV_rc_gdr=(env "LD_PRELOAD=$GDR_PRELOAD")
}
