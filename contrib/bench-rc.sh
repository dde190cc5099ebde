#!/bin/bash
#
# bench-rc.sh: compare rc_gdr with UCX's own rc_verbs on soft-RoCE, at the
# UCT level, with ucx_perftest.
#
# On the host it boots one contrib/rxe-vm.sh guest and runs the whole
# benchmark in it, so that both transports see the same guest, kernel and
# host load. Under TCG absolute numbers mean little and runs vary up to 2x
# (shared/research/rxe_vm.md section 6), so:
#   - the two transports run interleaved (rc_verbs, rc_gdr, rc_verbs, ...),
#     so that a slow phase of the host hurts both alike;
#   - each case is repeated --runs times and the medians are compared;
#   - every raw value is printed, so the noise can be judged.
#
# Exit status: 0 all runs produced a result (targets met or not: they are
# information, not a verdict, given the noise); 1 some run failed; 2 usage
# error; otherwise that of contrib/rxe-vm.sh (124 timeout, 125 VM failure).
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF="$ROOT/contrib/$(basename "${BASH_SOURCE[0]}")"

usage() {
    cat <<'EOF'
Usage: contrib/bench-rc.sh [options]
  --runs N          runs per transport and case (5); medians are compared
  --iters N         ucx_perftest -n for every case, or
  --iters CASE=N    for one case (repeatable); cases and defaults:
                      put64k=3000 put1m=200 get64k=3000 get1m=200 amlat=20000
                    (about 1-2 s each in the guest; warm-up is -n/10)
  --run-timeout S   limit for one ucx_perftest run, server and client (120)
  --no-pin          let the scheduler place server and client (default: server
                    on CPU 0, client on CPU 1)
  --port P          first TCP port; every run takes the next one (23000)
  --vm-timeout S    limit for the whole guest (default: from the run count)
  --inside          run here, in an rxe guest (no rxe-vm.sh of our own)
  -h, --help        this text
Environment: RC_GDR_BUILD (build), as for contrib/env.sh.
EOF
}

# The cases: name, ucx_perftest arguments, and which Final: column counts
# ("bw" = overall bandwidth MB/s, higher is better; "lat" = typical
# latency usec, lower is better).
CASE_NAMES=(put64k put1m get64k get1m amlat)
declare -A CASE_ARGS=(
    [put64k]="-t put_bw -D zcopy -s 65536"
    [put1m]="-t put_bw -D zcopy -s 1048576"
    [get64k]="-t get -D zcopy -s 65536"
    [get1m]="-t get -D zcopy -s 1048576"
    [amlat]="-t am_lat -s 8"
)
declare -A CASE_TITLE=(
    [put64k]="put_bw zcopy 64K"
    [put1m]="put_bw zcopy 1M"
    [get64k]="get zcopy 64K"
    [get1m]="get zcopy 1M"
    [amlat]="am_lat 8B"
)
declare -A CASE_METRIC=(
    [put64k]=bw [put1m]=bw [get64k]=bw [get1m]=bw [amlat]=lat
)
declare -A CASE_ITERS=(
    [put64k]=3000 [put1m]=200 [get64k]=3000 [get1m]=200 [amlat]=20000
)
TLS=(rc_verbs rc_gdr)
DEVICE=rxe1:1      # the server follows the client's -d: rxe1 loopback

RUNS=5 RUN_TIMEOUT=120 PORT=23000 VM_TIMEOUT="" INSIDE=0 PIN=1
ARGS=("$@")        # passed on unchanged to the guest

die() { echo "bench-rc: $*" >&2; exit 1; }
bad_usage() { echo "bench-rc: $*" >&2; usage >&2; exit 2; }

is_number() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ]; }

parse_iters() {
    local spec=$1 name
    if is_number "$spec"; then
        for name in "${CASE_NAMES[@]}"; do CASE_ITERS[$name]=$spec; done
    elif [[ $spec == *=* ]] && [ -n "${CASE_ARGS[${spec%%=*}]:-}" ] &&
         is_number "${spec#*=}"; then
        CASE_ITERS[${spec%%=*}]=${spec#*=}
    else
        bad_usage "--iters wants N or CASE=N (CASE: ${CASE_NAMES[*]})"
    fi
}

parse_args() {
    while [ $# -gt 0 ]; do
        case $1 in
        --runs|--run-timeout|--port|--vm-timeout)
            if [ $# -lt 2 ] || ! is_number "$2"; then
                bad_usage "$1 needs a number"
            fi
            case $1 in
            --runs)        RUNS=$2 ;;
            --run-timeout) RUN_TIMEOUT=$2 ;;
            --port)        PORT=$2 ;;
            --vm-timeout)  VM_TIMEOUT=$2 ;;
            esac
            shift ;;
        --iters)  [ $# -ge 2 ] || bad_usage "--iters needs a value"
                  parse_iters "$2"; shift ;;
        --inside) INSIDE=1 ;;
        --no-pin) PIN=0 ;;
        -h|--help) usage; exit 0 ;;
        *) bad_usage "unknown option '$1'" ;;
        esac
        shift
    done
}

# ---------------------------------------------------------------- host side

# One guest boot for everything. A normal run takes 2-4 s; the default limit
# gives each 20 s and the boot 2 min. A hung run is stopped by its own
# --run-timeout; should many hang, rxe-vm.sh stops the guest (rc 124) and
# the progress lines printed so far still show which runs did what.
run_in_guest() {
    local nruns=$(( RUNS * ${#TLS[@]} * ${#CASE_NAMES[@]} ))
    [ -n "$VM_TIMEOUT" ] || VM_TIMEOUT=$(( 120 + nruns * 20 ))
    [ -f "${RC_GDR_BUILD:-$ROOT/build}/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" ] ||
        die "no built module under ${RC_GDR_BUILD:-$ROOT/build}; run make there"
    echo "bench-rc: $nruns runs in one rxe-vm guest (limit ${VM_TIMEOUT} s)" >&2
    local rc=0
    (cd "$ROOT" && contrib/rxe-vm.sh --timeout "$VM_TIMEOUT" -- \
         "$SELF" --inside "${ARGS[@]}") || rc=$?
    exit "$rc"
}

# --------------------------------------------------------------- guest side

# The environment of each transport's processes, as an 'env' prefix.
# rc_verbs runs with the stock UCX only (whatever LD_PRELOAD the caller had,
# minus rc_gdr), rc_gdr with contrib/env.sh's preload on top: then no run of
# rc_verbs can be affected by the module, and both servers load what their
# client loads (the server takes -x from the client).
setup_env() {
    local build=${RC_GDR_BUILD:-$ROOT/build}
    BASE_PRELOAD=${LD_PRELOAD:-}
    # env.sh prepends the module once; strip it first if it was already set.
    BASE_PRELOAD=$(tr ':' '\n' <<<"$BASE_PRELOAD" |
                   grep -v '/libuct_ib_gdr\.so$' | paste -sd: || true)
    [ -f "$build/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" ] ||
        die "no built module under $build"
    # shellcheck disable=SC1091  # contrib/env.sh, found through $ROOT
    . "$ROOT/contrib/env.sh" "$build"
    GDR_PRELOAD=$LD_PRELOAD
    # shellcheck disable=SC2034  # ENV_* are read through a nameref (run_one)
    if [ -n "$BASE_PRELOAD" ]; then
        ENV_rc_verbs=(env "LD_PRELOAD=$BASE_PRELOAD")
    else
        ENV_rc_verbs=(env -u LD_PRELOAD)
    fi
    # shellcheck disable=SC2034
    ENV_rc_gdr=(env "LD_PRELOAD=$GDR_PRELOAD")
}

# Both processes busy-poll. When the scheduler puts them on the same one
# of the guest's two vCPUs, bandwidth halves for that run (measured: get
# 64K ~140 MB/s apart, ~60 MB/s together), a 2x mode that swamps the
# difference between transports; so each gets a vCPU of its own.
setup_pinning() {
    PIN_SERVER=() PIN_CLIENT=()
    if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
        PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)
    fi
}

# wait_listen PORT PID
. "$ROOT/contrib/lib/wait_listen.sh"

# run_one TL CASE PORT: one ucx_perftest server/client pair on a port of its
# own (a late server from an earlier run can then never take this client);
# prints the metric, or FAIL with the logs on stderr. Both processes are
# under 'timeout' and the server is reaped before returning, so nothing
# outlives the run.
run_one() {
    local tl=$1 name=$2 port=$3 iters=${CASE_ITERS[$2]}
    local -n env_cmd="ENV_$tl"
    local srv_log="$WORK/$name.$tl.$port.server" cli_log="$WORK/$name.$tl.$port.client"
    local srv_pid value="" rc=0
    local -a args
    read -ra args <<<"${CASE_ARGS[$name]}"

    timeout -k 5 "$RUN_TIMEOUT" "${env_cmd[@]}" "${PIN_SERVER[@]}" \
        ucx_perftest -p "$port" >"$srv_log" 2>&1 &
    srv_pid=$!
    if wait_listen "$port" "$srv_pid"; then
        timeout -k 5 "$RUN_TIMEOUT" "${env_cmd[@]}" "${PIN_CLIENT[@]}" \
            ucx_perftest 127.0.0.1 -p "$port" -x "$tl" -d "$DEVICE" \
            "${args[@]}" -n "$iters" -w $(( (iters + 9) / 10 )) \
            >"$cli_log" 2>&1 || rc=$?
    else
        rc=1; echo "(server never listened on port $port)" >"$cli_log"
    fi
    # The server ends by itself after its one test; if the client failed it
    # may still wait for a connection, so stop it (only our own pid).
    [ "$rc" = 0 ] || kill "$srv_pid" 2>/dev/null || true
    wait "$srv_pid" 2>/dev/null || true

    if [ "$rc" = 0 ]; then
        # Final: iters typical avg overall avg-bw overall-bw avg-mr overall-mr
        value=$(awk -v m="${CASE_METRIC[$name]}" \
                    '$1 == "Final:" { print (m == "bw") ? $7 : $3 }' "$cli_log")
    fi
    if [ -z "$value" ]; then
        {
            echo "bench-rc: $tl ${CASE_TITLE[$name]} port $port failed" \
                 "(rc $rc$([ "$rc" != 124 ] || echo ", timed out after $RUN_TIMEOUT s"))"
            tail -n 5 "$cli_log" | sed 's/^/  client: /'
            tail -n 5 "$srv_log" | sed 's/^/  server: /'
        } >&2
        value=FAIL
    fi
    echo "$value"
}

# median V...: of the numeric values (FAILs left out); empty if none.
median() {
    printf '%s\n' "$@" | { grep -v FAIL || true; } | sort -g |
        awk '{ v[NR] = $1 }
             END { if (NR == 0) exit
                   if (NR % 2) print v[(NR + 1) / 2]
                   else        print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# verdict METRIC VERBS GDR: "ratio target met?" columns. The targets are
# parity or better: bandwidth ratio >= 1.0, latency ratio <= 1.0.
verdict() {
    awk -v m="$1" -v a="$2" -v b="$3" 'BEGIN {
        t = (m == "bw") ? ">= 1.00" : "<= 1.00"
        if (a == "" || b == "" || a + 0 == 0) {
            printf "%7s %8s  %s", "-", t, "FAIL"
            exit
        }
        r = b / a
        ok = (m == "bw") ? (r >= 1.0) : (r <= 1.0)
        printf "%7.3f %8s  %s", r, t, ok ? "met" : "not met"
    }'
}

print_header() {
    echo "== rc_gdr vs rc_verbs, UCT ucx_perftest, client and server on $DEVICE"
    echo "   guest kernel $(uname -r), $(nproc) vCPU; UCX $(ucx_info -v 2>/dev/null |
          sed -n 's/^# Version //p' | head -n1)"
    echo "   loaded: rc_verbs runs: stock UCX, LD_PRELOAD=${BASE_PRELOAD:-(none)}"
    echo "           rc_gdr runs:   LD_PRELOAD=$GDR_PRELOAD"
    if [ ${#PIN_SERVER[@]} -gt 0 ]; then
        echo "   pinned: server on CPU ${PIN_SERVER[2]}, client on CPU ${PIN_CLIENT[2]}"
    else
        echo "   not pinned"
    fi
    echo "   runs per transport: $RUNS, interleaved rc_verbs, rc_gdr, ...;" \
         "medians compared"
    local name line="   -n:"
    for name in "${CASE_NAMES[@]}"; do line+=" $name=${CASE_ITERS[$name]}"; done
    echo "$line (warm-up -n/10)"
    [ -z "$CALLER_UCX_ENV" ] || printf '%s\n' "$CALLER_UCX_ENV" | sed 's/^/   env: /'
    echo
}

run_inside() {
    local name tl i v failed=0
    [ -e /sys/class/infiniband/"${DEVICE%:*}" ] ||
        die "no ${DEVICE%:*} here: run on the host (without --inside), or in contrib/rxe-vm.sh"
    command -v ucx_perftest >/dev/null || die "ucx_perftest not found"
    # The caller's UCX_* settings apply to both transports; show them.
    CALLER_UCX_ENV=$(env | grep '^UCX_' | sort || true)
    setup_env
    setup_pinning
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    print_header

    declare -A RAW     # RAW[case.tl] = "v1 v2 ..."
    for name in "${CASE_NAMES[@]}"; do
        echo "-- ${CASE_TITLE[$name]}: ucx_perftest ${CASE_ARGS[$name]}" \
             "-n ${CASE_ITERS[$name]}" >&2
        for i in $(seq "$RUNS"); do
            for tl in "${TLS[@]}"; do
                v=$(run_one "$tl" "$name" "$PORT")
                PORT=$((PORT + 1))
                [ "$v" != FAIL ] || failed=1
                RAW[$name.$tl]+="$v "
                echo "   run $i $tl: $v" >&2
            done
        done
    done

    echo
    printf '%-18s %-8s %10s %10s %7s %8s  %s\n' case unit rc_verbs rc_gdr \
        ratio target result
    local unit a b
    for name in "${CASE_NAMES[@]}"; do
        [ "${CASE_METRIC[$name]}" = bw ] && unit=MB/s || unit=usec
        # shellcheck disable=SC2086  # word splitting wanted: one per run
        a=$(median ${RAW[$name.rc_verbs]})
        # shellcheck disable=SC2086
        b=$(median ${RAW[$name.rc_gdr]})
        printf '%-18s %-8s %10s %10s %s\n' "${CASE_TITLE[$name]}" "$unit" \
            "${a:-FAIL}" "${b:-FAIL}" "$(verdict "${CASE_METRIC[$name]}" "$a" "$b")"
    done
    echo "(ratio = rc_gdr / rc_verbs; bandwidth: overall MB/s, higher is" \
         "better; latency: typical usec, lower is better)"

    echo
    echo "raw values, in run order:"
    for name in "${CASE_NAMES[@]}"; do
        for tl in "${TLS[@]}"; do
            printf '  %-18s %-9s %s\n' "${CASE_TITLE[$name]}" "$tl" \
                "${RAW[$name.$tl]% }"
        done
    done

    if [ "$failed" = 1 ]; then
        echo "bench-rc: some runs failed (FAIL above)" >&2
        exit 1
    fi
}

parse_args "$@"
if [ "$INSIDE" = 1 ]; then
    run_inside
else
    run_in_guest
fi
