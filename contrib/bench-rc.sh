#!/bin/bash
#
# bench-rc.sh: compare rc_gdr with UCX's own rc_verbs on soft-RoCE, at the
# UCT level, with ucx_perftest.
#
# With --tnic the same rounds run here, natively, on the project's stand-in
# NIC (test/tnic: a user-space device behind a replacement libibverbs, no
# guest). Its figures are the stand-in's, not a NIC's: one lock per process
# and copies through a shared-memory ring. rc_verbs' absolute figures are
# then printed as the stand-in's own cost per operation, the floor both
# transports stand on; the ratio says what rc_gdr adds to it.
#
# On the host it boots one contrib/rxe-vm.sh guest and runs the whole
# benchmark in it, so that both transports see the same guest, kernel and
# host load. Under TCG absolute numbers mean little and runs vary up to 2x
# (shared/research/rxe_vm.md section 6), so:
#   - each case runs --runs rounds; a round is one run of each transport,
#     back to back, in ABBA order (rc_verbs first in odd rounds, rc_gdr
#     first in even ones), so that a slow phase of the host hurts both runs
#     of a round alike and neither transport always runs first;
#   - a round gives one ratio, rc_gdr / rc_verbs; the verdict is on the
#     median of the rounds' ratios, with a distribution-free 95% interval
#     for that median (order statistics), which says whether a miss is a
#     difference or the emulator's noise;
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
  --runs N          rounds per case (9): a run of each transport, ABBA
                    order; the median of the rounds' ratios is judged
  --iters N         ucx_perftest -n for every case, or
  --iters CASE=N    for one case (repeatable); cases and defaults:
                      put64k=3000 put1m=200 get64k=3000 get1m=200
                      getbw64k=3000 getbw1m=200 amlat=20000 putlat=20000
                      ambw=50000 (get: one read in flight; getbw: 32)
                    (about 1-2 s each in the guest; warm-up is -n/10)
  --run-timeout S   limit for one ucx_perftest run, server and client (120)
  --no-pin          let the scheduler place server and client (default: server
                    on CPU 0, client on CPU 1; with --tnic and 4 CPUs or more,
                    CPUs 0,1 and 2,3, for the stand-in's device thread)
  --port P          first TCP port; every run takes the next one (23000)
  --vm-timeout S    limit for the whole guest (default: from the run count)
  --cases LIST      only these cases, comma-separated (all)
  --before DIR      compare with rc_gdr of the build in DIR instead of
                    rc_verbs (before/after a change; same UCX release)
  --summarize LOG...  no runs: the summary of earlier runs from their output
                    (for a run cut before it printed its own); only rounds
                    with both transports' values count
  --inside          run here, in an rxe guest (no rxe-vm.sh of our own)
  --tnic            run here on the stand-in NIC (tnic1:1, RC_GDR_BUILD's
                    test/tnic/lib), no guest; cases default to put, get and
                    get_bw 64K and 1M, am_lat and put_lat 8B, with smaller
                    -n (a quick look; intervals within +-3% took --runs 41
                    and -n 100000 for 64K, 6000 for 1M, 500000 for
                    latency: 7 min on 2 CPUs, doc/MEASUREMENTS.md)
  -h, --help        this text
Environment: RC_GDR_BUILD (build), as for contrib/env.sh.
EOF
}

# The cases: name, ucx_perftest arguments, and which Final: column counts
# ("bw" = overall bandwidth MB/s, "mr" = overall message rate per second,
# higher is better; "lat" = typical latency usec, lower is better).
# ucx_perftest's "get" keeps one read in flight (its window is 1), so the
# get cases time a read from post to completion; getbw keeps 32 in flight,
# put_bw's window, for bandwidth ("-O 32" is 1.22's get_bw, on every
# release).
CASE_NAMES=(put64k put1m get64k get1m getbw64k getbw1m amlat putlat ambw)
declare -A CASE_ARGS=(
    [put64k]="-t put_bw -D zcopy -s 65536"
    [put1m]="-t put_bw -D zcopy -s 1048576"
    [get64k]="-t get -D zcopy -s 65536"
    [get1m]="-t get -D zcopy -s 1048576"
    [getbw64k]="-t get -D zcopy -s 65536 -O 32"
    [getbw1m]="-t get -D zcopy -s 1048576 -O 32"
    [amlat]="-t am_lat -s 8"
    [putlat]="-t put_lat -s 8"
    [ambw]="-t am_bw -D short -s 8"
)
declare -A CASE_TITLE=(
    [put64k]="put_bw zcopy 64K"
    [put1m]="put_bw zcopy 1M"
    [get64k]="get zcopy 64K"
    [get1m]="get zcopy 1M"
    [getbw64k]="get_bw zcopy 64K"
    [getbw1m]="get_bw zcopy 1M"
    [amlat]="am_lat 8B"
    [putlat]="put_lat 8B"
    [ambw]="am_bw short 8B"
)
declare -A CASE_METRIC=(
    [put64k]=bw [put1m]=bw [get64k]=bw [get1m]=bw [getbw64k]=bw [getbw1m]=bw
    [amlat]=lat [putlat]=lat [ambw]=mr
)
declare -A CASE_ITERS=(
    [put64k]=3000 [put1m]=200 [get64k]=3000 [get1m]=200 [getbw64k]=3000
    [getbw1m]=200 [amlat]=20000 [putlat]=20000 [ambw]=50000
)
# The two sides of a round, reference first: labels, each with its UCT
# transport (-x) and, from setup_env, its environment ENV_<label>.
TLS=(rc_verbs rc_gdr)
declare -A XPORT=([rc_verbs]=rc_verbs [rc_gdr]=rc_gdr [before]=rc_gdr)
BEFORE=""
DEVICE=rxe1:1      # the server follows the client's -d: rxe1 loopback

RUNS=9 RUN_TIMEOUT=120 PORT=23000 VM_TIMEOUT="" INSIDE=0 PIN=1 TNIC=0
CASES_GIVEN=0 SUMMARIZE=()
ARGS=("$@")        # passed on unchanged to the guest

# die, bad_usage, is_number
CLI_NAME=bench-rc
# shellcheck source=contrib/lib/cli.sh
. "$ROOT/contrib/lib/cli.sh"
# bench_guest_run, _device, _tnic, _preloads
# shellcheck source=contrib/lib/bench_guest.sh
. "$ROOT/contrib/lib/bench_guest.sh"
# perftest_pair, perftest_final
# shellcheck source=contrib/lib/perftest.sh
. "$ROOT/contrib/lib/perftest.sh"

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

parse_cases() {
    local name
    local -a names
    IFS=, read -ra names <<<"$1"
    [ ${#names[@]} -gt 0 ] || bad_usage "--cases: empty list"
    for name in "${names[@]}"; do
        [ -n "${CASE_ARGS[$name]:-}" ] ||
            bad_usage "--cases: unknown case '$name' (${CASE_NAMES[*]})"
    done
    CASE_NAMES=("${names[@]}")
}

parse_args() {
    while [ $# -gt 0 ]; do
        case $1 in
        --runs|--run-timeout|--port|--vm-timeout)
            cli_need_number "$1" $# "${2:-}"
            case $1 in
            --runs)        RUNS=$2 ;;
            --run-timeout) RUN_TIMEOUT=$2 ;;
            --port)        PORT=$2 ;;
            --vm-timeout)  VM_TIMEOUT=$2 ;;
            esac
            shift ;;
        --iters)  [ $# -ge 2 ] || bad_usage "--iters needs a value"
                  parse_iters "$2"; shift ;;
        --cases)  [ $# -ge 2 ] || bad_usage "--cases needs a list"
                  parse_cases "$2"; CASES_GIVEN=1; shift ;;
        --before) [ $# -ge 2 ] || bad_usage "--before needs a build directory"
                  BEFORE=$(cd "$2" 2>/dev/null && pwd) ||
                      bad_usage "--before: no directory '$2'"
                  [ -f "$BEFORE/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" ] ||
                      bad_usage "--before: no built module under '$2'"
                  TLS=(before rc_gdr); shift ;;
        --summarize) shift
                  [ $# -ge 1 ] || bad_usage "--summarize needs a log"
                  SUMMARIZE=("$@"); return ;;
        --inside) INSIDE=1 ;;
        --tnic)   TNIC=1 ;;
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
    bench_guest_run --timeout "$VM_TIMEOUT" -- "$SELF" --inside "${ARGS[@]}"
}

# --------------------------------------------------------------- guest side

# The environment of each transport's processes, as an 'env' prefix
# (bench_guest_preloads): ENV_rc_verbs, ENV_rc_gdr, and with --before
# ENV_before, rc_gdr's preload with the other build's module in its place.
setup_env() {
    local build=${RC_GDR_BUILD:-$ROOT/build}
    [ -f "$build/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" ] ||
        die "no built module under $build"
    bench_guest_preloads "$build"
    if [ -n "$BEFORE" ]; then
        # The same preload, with the other build's module in its place
        BEFORE_PRELOAD=$(tr ':' '\n' <<<"$GDR_PRELOAD" |
            sed "s|.*/libuct_ib_gdr\.so\$|$BEFORE/src/uct/ib_gdr/.libs/libuct_ib_gdr.so|" |
            paste -sd:)
        # shellcheck disable=SC2034
        ENV_before=(env "LD_PRELOAD=$BEFORE_PRELOAD")
    fi
}

# Both processes busy-poll. When the scheduler puts them on the same one
# of the guest's two vCPUs, bandwidth halves for that run (measured: get
# 64K ~140 MB/s apart, ~60 MB/s together), a 2x mode that swamps the
# difference between transports; so each gets a vCPU of its own.
# On the stand-in NIC each process also runs the device's own thread, which
# executes the requests aimed at its memory; with a CPU each, it would take
# turns with the polling loop, so with 4 CPUs or more each process gets two.
# (A device thread that never sleeps was tried on the GPU machine's 16 cores:
# latency three times worse, no narrower intervals; doc/MEASUREMENTS.md.)
setup_pinning() {
    PIN_SERVER=() PIN_CLIENT=()
    if [ "$PIN" = 1 ] && [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then
        if [ "$TNIC" = 1 ] && [ "$(nproc)" -ge 4 ]; then
            PIN_SERVER=(taskset -c 0,1) PIN_CLIENT=(taskset -c 2,3)
        else
            PIN_SERVER=(taskset -c 0) PIN_CLIENT=(taskset -c 1)
        fi
    fi
}

# run_one TL CASE PORT: one ucx_perftest server/client pair (perftest_pair)
# on a port of its own; prints the metric, or FAIL with the logs on stderr.
run_one() {
    local tl=$1 name=$2 port=$3 iters=${CASE_ITERS[$2]}
    local -n env_cmd="ENV_$tl"
    local srv_log="$WORK/$name.$tl.$port.server" cli_log="$WORK/$name.$tl.$port.client"
    local value="" rc=0
    local -a args server client
    read -ra args <<<"${CASE_ARGS[$name]}"

    # shellcheck disable=SC2034  # server and client: passed by name
    # (the server is told the device too: 1.22 refuses a UCT test without)
    server=("${env_cmd[@]}" "${PIN_SERVER[@]}" ucx_perftest -p "$port"
            -x "${XPORT[$tl]}" -d "$DEVICE")
    # shellcheck disable=SC2034
    client=("${env_cmd[@]}" "${PIN_CLIENT[@]}" ucx_perftest 127.0.0.1
            -p "$port" -x "${XPORT[$tl]}" -d "$DEVICE" "${args[@]}"
            -n "$iters" -w $(( (iters + 9) / 10 )))
    perftest_pair "$port" "$RUN_TIMEOUT" "$srv_log" "$cli_log" server client ||
        rc=$?

    if [ "$rc" = 0 ]; then
        case ${CASE_METRIC[$name]} in
        bw) value=$(perftest_final 7 "$cli_log") ;;
        mr) value=$(perftest_final 9 "$cli_log") ;;
        *)  value=$(perftest_final 3 "$cli_log") ;;
        esac
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

declare -A RAW     # RAW[case.tl] = "v1 v2 ...": a value per round

# median V...: of the numeric values (FAILs left out); empty if none.
median() {
    printf '%s\n' "$@" | { grep -v FAIL || true; } | sort -g |
        awk '{ v[NR] = $1 }
             END { if (NR == 0) exit
                   if (NR % 2) print v[(NR + 1) / 2]
                   else        print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# pair_stats METRIC "A1 A2 ..." "B1 B2 ...": the rounds' ratios B/A (FAILs
# and zero rates left out). Prints "n median lo hi verdict": the median of
# the ratios, and the distribution-free interval [r(k), r(n+1-k)] around it,
# k the largest with P(Binomial(n, 1/2) < k) <= 2.5% (at least 95%
# coverage; none below 6 rounds). The targets are parity or better:
# bandwidth and message rate ratio >= 1.0, latency ratio <= 1.0. A missed
# target whose interval holds 1.0 is "not met (noise)": the rounds do not
# tell the transports apart.
pair_stats() {
    awk -v m="$1" -v as="$2" -v bs="$3" 'BEGIN {
        na = split(as, a, " "); split(bs, b, " ")
        for (i = 1; i <= na; ++i) {
            if (a[i] == "FAIL" || b[i] == "FAIL" || a[i] + 0 == 0) continue
            r[++n] = b[i] / a[i]
        }
        if (n == 0) { print "0 - - - FAIL"; exit }
        for (i = 2; i <= n; ++i) {            # insertion sort: n is small
            v = r[i]
            for (j = i - 1; j >= 1 && r[j] > v; --j) r[j + 1] = r[j]
            r[j + 1] = v
        }
        med = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
        # P(X <= k-1) for X ~ Binomial(n, 1/2), summed term by term
        k = 0; cdf = 0; term = 0.5 ^ n
        for (x = 0; x < n; ++x) {
            if (cdf + term > 0.025) break
            cdf += term; k = x + 1
            term = term * (n - x) / (x + 1)
        }
        lo = (k >= 1) ? sprintf("%.3f", r[k]) : "-"
        hi = (k >= 1) ? sprintf("%.3f", r[n + 1 - k]) : "-"
        met = (m == "lat") ? (med <= 1.0) : (med >= 1.0)
        if (met) {
            v = "met"
        } else if (k == 0) {
            v = "not_met_(too_few_rounds_to_tell)"
        } else if (r[k] <= 1.0 && r[n + 1 - k] >= 1.0) {
            v = "not_met_(noise)"
        } else {
            v = "not_met"
        }
        printf "%d %.3f %s %s %s\n", n, med, lo, hi, v
    }'
}

print_header() {
    echo "== ${TLS[1]} vs ${TLS[0]}, UCT ucx_perftest, client and server on $DEVICE"
    if [ "$TNIC" = 1 ]; then
        echo "   STAND-IN NIC (test/tnic, $TNIC_LIB), native: kernel" \
             "$(uname -r), $(nproc) CPUs, load average" \
             "$(cut -d' ' -f1-3 /proc/loadavg); UCX $RC_GDR_UCX_VERSION"
    else
        echo "   guest kernel $(uname -r), $(nproc) vCPU; UCX $RC_GDR_UCX_VERSION"
    fi
    if [ -n "$BEFORE" ]; then
        echo "   loaded: before runs:   LD_PRELOAD=$BEFORE_PRELOAD"
    else
        echo "   loaded: rc_verbs runs: stock UCX, LD_PRELOAD=${BASE_PRELOAD:-(none)}"
    fi
    if [ -n "$GDR_PRELOAD" ]; then
        echo "           rc_gdr runs:   LD_PRELOAD=$GDR_PRELOAD"
    else # a UCX that finds the module by name (1.22 on)
        echo "           rc_gdr runs:   UCX_PLUGIN_PATH=${UCX_PLUGIN_PATH:-}"
    fi
    if [ ${#PIN_SERVER[@]} -gt 0 ]; then
        echo "   pinned: server on CPU ${PIN_SERVER[2]}, client on CPU ${PIN_CLIENT[2]}"
    else
        echo "   not pinned"
    fi
    echo "   rounds per case: $RUNS, one run of each transport in ABBA order;" \
         "the median of the rounds' ratios is judged"
    local name line="   -n:"
    for name in "${CASE_NAMES[@]}"; do line+=" $name=${CASE_ITERS[$name]}"; done
    echo "$line (warm-up -n/10)"
    [ -z "$CALLER_UCX_ENV" ] || printf '%s\n' "$CALLER_UCX_ENV" | sed 's/^/   env: /'
    echo
}

# print_summary: the verdict table, the stand-in's own cost (--tnic) and
# every raw value, from RAW[case.tl] ("v1 v2 ...", a value per round) of
# CASE_NAMES and TLS
print_summary() {
    local name tl unit a b n med lo hi res target
    echo
    printf '%-18s %-5s %9s %9s %7s %15s %8s  %s\n' case unit "${TLS[0]}" \
        "${TLS[1]}" ratio "95% interval" target result
    for name in "${CASE_NAMES[@]}"; do
        case ${CASE_METRIC[$name]} in
        bw)  unit=MB/s target=">= 1.00" ;;
        mr)  unit=msg/s target=">= 1.00" ;;
        *)   unit=usec target="<= 1.00" ;;
        esac
        # shellcheck disable=SC2086  # word splitting wanted: one per run
        a=$(median ${RAW[$name.${TLS[0]}]})
        # shellcheck disable=SC2086
        b=$(median ${RAW[$name.${TLS[1]}]})
        # (a here-string: the guest has no /dev/fd for '< <(...)')
        read -r n med lo hi res <<<"$(pair_stats "${CASE_METRIC[$name]}" \
            "${RAW[$name.${TLS[0]}]}" "${RAW[$name.${TLS[1]}]}")"
        printf '%-18s %-5s %9s %9s %7s %15s %8s  %s\n' \
            "${CASE_TITLE[$name]}" "$unit" "${a:-FAIL}" "${b:-FAIL}" "$med" \
            "[$lo, $hi]" "$target" "${res//_/ } ($n rounds)"
    done
    echo "(ratio = median over rounds of ${TLS[1]} / ${TLS[0]} in the round;" \
         "${TLS[0]} and ${TLS[1]} columns: each side's median, for scale;"
    echo " bandwidth: overall MB/s, message rate: overall msg/s, higher is" \
         "better; latency: typical usec, lower is better; 'noise': the" \
         "interval holds 1.0)"
    [ "$TNIC" = 0 ] || tnic_cost
    echo
    echo "raw values, by round (odd rounds ran ${TLS[0]} first, even ones ${TLS[1]}):"
    for name in "${CASE_NAMES[@]}"; do
        for tl in "${TLS[@]}"; do
            printf '  %-18s %-9s %s\n' "${CASE_TITLE[$name]}" "$tl" \
                "${RAW[$name.$tl]% }"
        done
    done
}

run_inside() {
    local name tl i v failed=0
    local -a order
    [ "$TNIC" = 1 ] || bench_guest_device "$DEVICE"
    # The caller's UCX_* settings apply to both transports; show them.
    CALLER_UCX_ENV=$(env | grep '^UCX_' | sort || true)
    setup_env   # the build's UCX first in PATH (contrib/env.sh)
    command -v ucx_perftest >/dev/null || die "ucx_perftest not found"
    setup_pinning
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"
          [ "$TNIC" = 0 ] || rm -f "/dev/shm/rc_gdr_tnic.$RC_GDR_TNIC_FABRIC".*' EXIT
    print_header

    for name in "${CASE_NAMES[@]}"; do
        echo "-- ${CASE_TITLE[$name]}: ucx_perftest ${CASE_ARGS[$name]}" \
             "-n ${CASE_ITERS[$name]}" >&2
        for i in $(seq "$RUNS"); do
            order=("${TLS[@]}")
            [ $((i % 2)) = 1 ] || order=("${TLS[1]}" "${TLS[0]}")
            for tl in "${order[@]}"; do
                v=$(run_one "$tl" "$name" "$PORT")
                PORT=$((PORT + 1))
                [ "$v" != FAIL ] || failed=1
                RAW[$name.$tl]+="$v "
                echo "   round $i $tl: $v" >&2
            done
        done
    done

    print_summary
    if [ "$failed" = 1 ]; then
        echo "bench-rc: some runs failed (FAIL above)" >&2
        exit 1
    fi
}

# --summarize LOG...: the summary of runs already made, from their
# progress lines ("-- TITLE: ..." and "round I TL: V"), for a run cut before
# it printed its own (a time limit). Only rounds with both transports'
# values count, so a round cut in its middle is left out.
summarize_logs() {
    local log f=0 n name="" line title i tl v
    local -a names=()
    declare -A round last   # round[case.tl.log.I] = V; last[case.log] = I
    for log in "$@"; do
        [ -r "$log" ] || die "--summarize: cannot read '$log'"
        f=$((f + 1))
        echo "-- from $log, whose run began:"
        sed '/^$/q' "$log"
        while IFS= read -r line; do
            case $line in
            "== "*" vs "*)      # "== rc_gdr vs rc_verbs, ...": reference second
                tl=${line#== }
                TLS=("$(sed 's/^[^ ]* vs \([^,]*\),.*/\1/' <<<"$tl")" "${tl%% *}") ;;
            *"STAND-IN NIC"*)
                TNIC=1 ;;
            "-- "*": ucx_perftest "*)
                title=${line#-- }
                title=${title%%: ucx_perftest *}
                name=""
                for i in "${!CASE_TITLE[@]}"; do
                    [ "${CASE_TITLE[$i]}" != "$title" ] || name=$i
                done
                [ -n "$name" ] || die "--summarize: unknown case '$title' in $log"
                [[ " ${names[*]} " == *" $name "* ]] || names+=("$name") ;;
            "   round "*": "*)
                [ -n "$name" ] || continue
                read -r _ i tl v <<<"$line"
                round[$name.${tl%:}.$f.$i]=$v
                last[$name.$f]=$i ;;
            esac
        done <"$log"
    done
    [ ${#names[@]} -gt 0 ] || die "--summarize: no rounds in $*"
    CASE_NAMES=("${names[@]}")
    for name in "${CASE_NAMES[@]}"; do
        for n in $(seq "$f"); do
            for i in $(seq "${last[$name.$n]:-0}"); do
                if [ -z "${round[$name.${TLS[0]}.$n.$i]:-}" ] ||
                   [ -z "${round[$name.${TLS[1]}.$n.$i]:-}" ]; then
                    echo "   ${CASE_TITLE[$name]}: round $i has one" \
                         "transport's value only, left out"
                    continue
                fi
                for tl in "${TLS[@]}"; do
                    RAW[$name.$tl]+="${round[$name.$tl.$n.$i]} "
                done
            done
        done
    done
    print_summary
}

# --tnic: the stand-in NIC of the build, a fabric of this run's own
setup_tnic() {
    local build=${RC_GDR_BUILD:-$ROOT/build}
    # the fabric's files are removed at the end (run_inside)
    bench_guest_tnic "$build" "bench$$" ||
        die "no stand-in NIC under $build/test/tnic/lib (make check TESTS=)"
    DEVICE=tnic1:1
    if [ "$CASES_GIVEN" = 0 ]; then
        CASE_NAMES=(put64k put1m get64k get1m getbw64k getbw1m amlat putlat)
    fi
    local name
    declare -A small=([put64k]=300 [put1m]=20 [get64k]=300 [get1m]=20
                      [getbw64k]=300 [getbw1m]=20
                      [amlat]=5000 [putlat]=5000 [ambw]=20000)
    for name in "${!small[@]}"; do
        [[ " ${ARGS[*]} " == *" --iters "* ]] || CASE_ITERS[$name]=${small[$name]}
    done
}

# The stand-in's own cost per operation: rc_verbs' median, as time per
# operation (bandwidth cases: bytes / (MB/s); latency: one way)
tnic_cost() {
    local name med bytes
    echo
    echo "the stand-in NIC's own cost per operation (${TLS[0]}'s median" \
         "above, no rc_gdr in it):"
    for name in "${CASE_NAMES[@]}"; do
        # shellcheck disable=SC2086
        med=$(median ${RAW[$name.${TLS[0]}]})
        [ -n "$med" ] || continue
        case ${CASE_METRIC[$name]} in
        bw)  bytes=$(sed 's/.*-s \([0-9]*\).*/\1/' <<<"${CASE_ARGS[$name]}")
             awk -v n="${CASE_TITLE[$name]}" -v b="$bytes" -v m="$med" \
                 'BEGIN { printf "  %-18s %9.1f usec/op\n", n, b / (m * 1048576) * 1e6 }' ;;
        mr)  awk -v n="${CASE_TITLE[$name]}" -v m="$med" \
                 'BEGIN { printf "  %-18s %9.3f usec/op\n", n, 1e6 / m }' ;;
        *)   printf '  %-18s %9s usec/op (one way)\n' "${CASE_TITLE[$name]}" "$med" ;;
        esac
    done
}

parse_args "$@"
if [ ${#SUMMARIZE[@]} -gt 0 ]; then
    summarize_logs "${SUMMARIZE[@]}"
    exit 0
fi
if [ "$TNIC" = 1 ]; then
    setup_tnic
    INSIDE=1
fi
# The guest runs from the repository root: --before's directory, resolved
# here, travels as an absolute path
for i in "${!ARGS[@]}"; do
    [ "${ARGS[$i]}" != --before ] || ARGS[i + 1]=$BEFORE
done
if [ "$INSIDE" = 1 ]; then
    run_inside
else
    run_in_guest
fi
