#!/bin/bash
#
# bench-callgrind.sh: user-space instructions per UCT operation, rc_gdr
# against UCX's own rc_verbs, counted by callgrind (deterministic, unlike
# timings under qemu TCG).
#
# On the host it boots one contrib/rxe-vm.sh guest and runs everything in
# it, so that both transports see the same guest. Each case runs the
# ucx_perftest client under 'valgrind --tool=callgrind' with collection on
# only inside the operation's function and the interface's progress
# function (--toggle-collect), once with N1 and once with N2 iterations and
# no warm-up; the server runs natively. Instrumentation starts at the first
# endpoint (contrib/bench/callgrind-start.c): UCX's start-up runs uninstrumented.
# Set-up, connection and teardown cost the same in both runs, so
#
#     instructions per op = (Ir(N2) - Ir(N1)) / (N2 - N1)
#
# for the operation (inclusive: everything it calls, the verbs provider's
# post included). Progress per completion is taken where ucx_perftest waits
# for each completion of the first case (one window: one call per
# operation), apart from its polls for nothing elsewhere, whose number
# depends on timing.
#
# Exit status: 0 every run produced its counts; 1 some run failed; 2 usage
# error; otherwise that of contrib/rxe-vm.sh (124 timeout, 125 VM failure).
#
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SELF="$ROOT/contrib/$(basename "${BASH_SOURCE[0]}")"

usage() {
    cat <<'EOF'
Usage: contrib/bench-callgrind.sh [options]
  --iters N1,N2     the two iteration counts (200,400)
  --cases LIST      comma-separated, from: put_zcopy get_zcopy am_short
                    am_bcopy put_short (all)
  --tls LIST        comma-separated transports (rc_verbs,rc_gdr); the table
                    needs both
  --size BYTES      message size of every case (default: 8, get_zcopy 128:
                    rc_verbs reads at least 65 bytes by zcopy)
  --run-timeout S   limit for one valgrind run (600)
  --port P          first TCP port; every run takes the next one (23500)
  --vm-timeout S    limit for the whole guest (default: from the run count)
  --keep DIR        keep the callgrind output files in DIR (a host directory,
                    shared writable with the guest)
  --inside          run here, in an rxe guest (no rxe-vm.sh of our own)
  --tnic            run here, natively, on the project's stand-in NIC
                    (test/tnic; its ibv_post_send is counted in both
                    transports' figures, as rxe's provider is in the guest)
  -h, --help        this text
Environment: RC_GDR_BUILD (build), as for contrib/env.sh.
EOF
}

CASE_NAMES=(put_zcopy get_zcopy am_short am_bcopy put_short)
declare -A CASE_ARGS=(
    [put_zcopy]="-t put_bw -D zcopy"
    [get_zcopy]="-t get -D zcopy"
    [am_short]="-t am_bw -D short"
    [am_bcopy]="-t am_bw -D bcopy"
    [put_short]="-t put_bw -D short"
)
declare -A CASE_SIZE=(
    [put_zcopy]=8 [get_zcopy]=128 [am_short]=8 [am_bcopy]=8 [put_short]=8
)
# The function each case's operation enters, per transport
declare -A OP_FUNC=(
    [rc_verbs.put_zcopy]=uct_rc_verbs_ep_put_zcopy
    [rc_verbs.get_zcopy]=uct_rc_verbs_ep_get_zcopy
    [rc_verbs.am_short]=uct_rc_verbs_ep_am_short
    [rc_verbs.am_bcopy]=uct_rc_verbs_ep_am_bcopy
    [rc_verbs.put_short]=uct_rc_verbs_ep_put_short
    [rc_gdr.put_zcopy]=uct_rc_gdr_ep_put_zcopy
    [rc_gdr.get_zcopy]=uct_rc_gdr_ep_get_zcopy
    [rc_gdr.am_short]=uct_rc_gdr_ep_am_short
    [rc_gdr.am_bcopy]=uct_rc_gdr_ep_am_bcopy
    [rc_gdr.put_short]=uct_rc_gdr_ep_put_short
)
# The progress function each transport registers with the worker is found
# in the guest by contrib/bench/callgrind-progress.c (rc_verbs' is static, and
# callgrind names it by its offset in the stripped library)
declare -A PROGRESS_FUNC=()
TLS=(rc_verbs rc_gdr)
KNOWN_TLS=" rc_verbs rc_gdr "
DEVICE=rxe1:1      # the server follows the client's -d: rxe1 loopback

N1=200 N2=400 SIZE="" RUN_TIMEOUT=600 PORT=23500 VM_TIMEOUT="" INSIDE=0 KEEP=""
TNIC=0
CASES=("${CASE_NAMES[@]}")
ARGS=("$@")        # passed on unchanged to the guest

# die, bad_usage, is_number
CLI_NAME=bench-callgrind
# shellcheck source=contrib/lib/cli.sh
. "$ROOT/contrib/lib/cli.sh"
# bench_guest_run, _device, _tnic, _preloads
# shellcheck source=contrib/lib/bench_guest.sh
. "$ROOT/contrib/lib/bench_guest.sh"
# perftest_pair
# shellcheck source=contrib/lib/perftest.sh
. "$ROOT/contrib/lib/perftest.sh"

parse_args() {
    local name
    while [ $# -gt 0 ]; do
        case $1 in
        --iters)
            if [ $# -lt 2 ] || ! [[ $2 =~ ^[0-9]+,[0-9]+$ ]]; then
                bad_usage "--iters wants N1,N2"
            fi
            N1=${2%,*} N2=${2#*,}
            [ "$N2" -gt "$N1" ] || bad_usage "--iters: N2 must exceed N1"
            shift ;;
        --cases)
            [ $# -ge 2 ] || bad_usage "--cases needs a list"
            IFS=, read -ra CASES <<<"$2"
            for name in "${CASES[@]}"; do
                [ -n "${CASE_ARGS[$name]:-}" ] ||
                    bad_usage "unknown case '$name' (${CASE_NAMES[*]})"
            done
            shift ;;
        --tls)
            [ $# -ge 2 ] || bad_usage "--tls needs a list"
            IFS=, read -ra TLS <<<"$2"
            for name in "${TLS[@]}"; do
                [[ $KNOWN_TLS == *" $name "* ]] ||
                    bad_usage "unknown transport '$name' (rc_verbs, rc_gdr)"
            done
            shift ;;
        --size|--run-timeout|--port|--vm-timeout)
            cli_need_number "$1" $# "${2:-}"
            case $1 in
            --size)        SIZE=$2 ;;
            --run-timeout) RUN_TIMEOUT=$2 ;;
            --port)        PORT=$2 ;;
            --vm-timeout)  VM_TIMEOUT=$2 ;;
            esac
            shift ;;
        --keep)
            if [ $# -lt 2 ] || [ ! -d "$2" ]; then
                bad_usage "--keep needs a directory"
            fi
            KEEP=$(realpath "$2"); shift ;;
        --inside) INSIDE=1 ;;
        --tnic)   INSIDE=1 TNIC=1 DEVICE=tnic1:1 ;;
        -h|--help) usage; exit 0 ;;
        *) bad_usage "unknown option '$1'" ;;
        esac
        shift
    done
}

# ---------------------------------------------------------------- host side

# One guest boot for everything; a valgrind run of a few hundred
# iterations takes about a minute there, the boot a few.
run_in_guest() {
    local nruns=$(( ${#TLS[@]} * ${#CASES[@]} * 2 ))
    local -a rw=()
    [ -n "$VM_TIMEOUT" ] || VM_TIMEOUT=$(( 600 + nruns * 180 ))
    [ -f "${RC_GDR_BUILD:-$ROOT/build}/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" ] ||
        die "no built module under ${RC_GDR_BUILD:-$ROOT/build}; run make there"
    command -v valgrind >/dev/null || die "valgrind is not installed"
    [ -z "$KEEP" ] || rw=(--rw "$KEEP")
    echo "bench-callgrind: $nruns valgrind runs in one rxe-vm guest" \
         "(limit ${VM_TIMEOUT} s)" >&2
    bench_guest_run "${rw[@]}" --timeout "$VM_TIMEOUT" -- \
        "$SELF" --inside "${ARGS[@]}"
}

# --------------------------------------------------------------- guest side

# As contrib/bench-rc.sh (bench_guest_preloads): rc_verbs runs with the
# stock UCX only, rc_gdr with contrib/env.sh's preload on top.
setup_env() {
    bench_guest_preloads "${RC_GDR_BUILD:-$ROOT/build}"
    # the clients under valgrind also preload the instrumentation switch
    START_SO="$WORK/callgrind-start.so"
    cc -O2 -shared -fPIC -o "$START_SO" "$ROOT/contrib/bench/callgrind-start.c" \
        -ldl || die "cannot build $START_SO"
    # shellcheck disable=SC2034
    CLIENT_ENV_rc_verbs=(env "LD_PRELOAD=$START_SO${BASE_PRELOAD:+:$BASE_PRELOAD}")
    # shellcheck disable=SC2034
    CLIENT_ENV_rc_gdr=(env "LD_PRELOAD=$START_SO:$GDR_PRELOAD")
}

# find_progress TL: PROGRESS_FUNC[TL], the name callgrind gives the
# progress function the transport registers (the helper is built here, from
# UCX's installed headers).
find_progress() {
    local tl=$1 helper="$WORK/callgrind-progress"
    local -n env_cmd="ENV_$tl"
    local line name
    if [ ! -x "$helper" ]; then
        cc -O2 -o "$helper" "$ROOT/contrib/bench/callgrind-progress.c" \
            -luct -lucs -ldl || die "cannot build $helper"
    fi
    line=$("${env_cmd[@]}" "$helper" "$tl" "$DEVICE") ||
        die "no progress function found for $tl on $DEVICE"
    PROGRESS_FUNC[$tl]=${line%% *}
    # a static function: callgrind names it from the library's symbol
    # table when it has one (dladdr sees exported symbols only)
    if [[ ${PROGRESS_FUNC[$tl]} == 0x* ]]; then
        name=$(nm --defined-only "${line#* }" 2>/dev/null |
               awk -v a="${PROGRESS_FUNC[$tl]#0x}" \
                   '!n && $1 == a && $2 ~ /^[tT]$/ { print $3; n = 1 }' ||
               true)
        [ -z "$name" ] || PROGRESS_FUNC[$tl]=$name
    fi
    echo "   $tl progress: ${PROGRESS_FUNC[$tl]} in ${line#* }"
}

# inclusive FILE FUNC: the inclusive instruction count of FUNC in a
# callgrind output file (0 when it never ran with collection on).
inclusive() {
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk -v f="$2" '
            !found { for (i = 2; i <= NF; ++i) {
                         name = $i; sub(/^[^:]*:/, "", name)
                         if (name == f) { gsub(/,/, "", $1); found = $1 }
                     } }
            END { print found + 0 }'
}

# main_arc FILE FUNC: "CALLS IR" of the call site that called FUNC most
# often. Progress is called from several places of ucx_perftest: once per
# completion where it waits for one (the operation's loop), and an
# untimed number of times where it polls for nothing (the flush at the
# end): the first is what a completion costs.
main_arc() {
    awk -v f="$2" '
        function idname(s,    m, rest) {
            if (!match(s, /^\([0-9]+\)/)) {
                return s
            }
            m    = substr(s, RSTART, RLENGTH)
            rest = substr(s, RLENGTH + 2)
            if (rest != "") {
                names[m] = rest
            }
            return m
        }
        /^c?fn=/ {
            id = idname(substr($0, index($0, "=") + 1))
            if ($0 ~ /^cfn=/) { callee = id; want = 1 }
            next
        }
        want && /^calls=/ { split(substr($0, 7), c, " "); calls = c[1]; next }
        want && (calls != "") {
            if ((names[callee] == f) && (calls + 0 > best)) {
                best = calls + 0; cost = $NF
            }
            want = 0; calls = ""
        }
        END { print best + 0, cost + 0 }' "$1"
}

# run_one TL CASE N PORT: prints "OP_IR PROGRESS_CALLS PROGRESS_IR" (the
# progress of the main call site), or FAIL with the logs on stderr.
run_one() {
    local tl=$1 name=$2 iters=$3 port=$4
    local -n env_cmd="ENV_$tl" client_env="CLIENT_ENV_$tl"
    local op=${OP_FUNC[$tl.$name]} progress=${PROGRESS_FUNC[$tl]}
    local base="$WORK/$name.$tl.$iters"
    local rc=0 a b
    local -a args server client
    read -ra args <<<"${CASE_ARGS[$name]}"

    # shellcheck disable=SC2034  # server and client: passed by name
    server=("${env_cmd[@]}" ucx_perftest -p "$port")
    # shellcheck disable=SC2034
    client=("${client_env[@]}"
            valgrind --tool=callgrind --callgrind-out-file="$base.cg"
                     --instr-atstart=no
                     --toggle-collect="$op" --toggle-collect="$progress"
            ucx_perftest 127.0.0.1 -p "$port" -x "$tl" -d "$DEVICE"
            "${args[@]}" -s "${SIZE:-${CASE_SIZE[$name]}}" -n "$iters" -w 0)
    perftest_pair "$port" "$RUN_TIMEOUT" "$base.server" "$base.client" \
        server client || rc=$?

    if [ "$rc" = 0 ] && grep -q '^Final:' "$base.client"; then
        a=$(inclusive "$base.cg" "$op")
        b=$(main_arc "$base.cg" "$progress")
        [ -z "$KEEP" ] || cp "$base.cg" "$KEEP/"
        echo "$a $b"
        return
    fi
    {
        echo "bench-callgrind: $tl $name -n $iters port $port failed (rc $rc)"
        tail -n 8 "$base.client" | sed 's/^/  client: /'
        tail -n 4 "$base.server" | sed 's/^/  server: /'
        ! grep -q 'memory unmap events' "$base.client" ||
            echo "  (valgrind gives UCX no memory events: this rc_gdr md" \
                 "does not open without them)"
    } >&2
    echo FAIL
}

# per_op A1 A2: (A2 - A1) / (N2 - N1), one decimal
per_op() {
    awk -v a="$1" -v b="$2" -v n=$(( N2 - N1 )) \
        'BEGIN { printf "%.1f", (b - a) / n }'
}

run_inside() {
    local name tl iters v failed=0
    if [ "$TNIC" = 1 ]; then
        # the stand-in's libibverbs.so.1 first, on a fabric of this run's
        local build=${RC_GDR_BUILD:-$ROOT/build}
        bench_guest_tnic "$build" "cg$$" ||
            die "no stand-in NIC in $build/test/tnic/lib (make check TESTS= there)"
    else
        bench_guest_device "$DEVICE"
    fi
    command -v ucx_perftest >/dev/null || die "ucx_perftest not found"
    command -v valgrind >/dev/null || die "valgrind not found"
    command -v callgrind_annotate >/dev/null || die "callgrind_annotate not found"
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"; rm -f /dev/shm/rc_gdr_tnic.cg$$.*' EXIT
    setup_env

    echo "== instructions per operation (callgrind), UCT ucx_perftest on" \
         "$DEVICE$( [ "$TNIC" = 0 ] || echo " (STAND-IN NIC, test/tnic)")"
    echo "   kernel $(uname -r); UCX $RC_GDR_UCX_VERSION; $(valgrind --version)"
    echo "   -s ${SIZE:-per case}, -n $N1 and $N2, -w 0; per op = (Ir(-n $N2) - Ir(-n $N1))" \
         "/ $(( N2 - N1 )), inclusive"
    for tl in "${TLS[@]}"; do
        find_progress "$tl"
    done
    echo

    declare -A IR   # IR[case.tl.iters] = "op progress"
    for name in "${CASES[@]}"; do
        for tl in "${TLS[@]}"; do
            for iters in "$N1" "$N2"; do
                v=$(run_one "$tl" "$name" "$iters" "$PORT")
                PORT=$((PORT + 1))
                [ "$v" != FAIL ] || failed=1
                IR[$name.$tl.$iters]=$v
                echo "-- $name $tl -s ${SIZE:-${CASE_SIZE[$name]}} -n $iters:" \
                     "op Ir, progress calls and Ir = $v" >&2
            done
        done
    done

    printf '%-22s %10s %10s %7s\n' "instructions per op" rc_verbs rc_gdr ratio
    local a b what
    for name in "${CASES[@]}" progress; do
        PER_rc_verbs=- PER_rc_gdr=-
        for tl in "${TLS[@]}"; do
            # progress: the first case's, per completion (its main call
            # site: (IR(N2) - IR(N1)) / (CALLS(N2) - CALLS(N1)))
            [ "$name" = progress ] && what=${CASES[0]} || what=$name
            a=${IR[$what.$tl.$N1]} b=${IR[$what.$tl.$N2]}
            if [ "$a" = FAIL ] || [ "$b" = FAIL ]; then
                v=FAIL
            elif [ "$name" = progress ]; then
                v=$(awk -v a="$a" -v b="$b" 'BEGIN {
                        split(a, x, " "); split(b, y, " ")
                        if (y[2] > x[2]) printf "%.1f", (y[3] - x[3]) / (y[2] - x[2])
                        else print "-" }')
            else
                v=$(per_op "${a%% *}" "${b%% *}")
            fi
            printf -v "PER_$tl" '%s' "$v"
        done
        if [ "$name" = progress ]; then
            name="progress ($what)"
        fi
        printf '%-22s %10s %10s %7s\n' "$name" "$PER_rc_verbs" "$PER_rc_gdr" \
            "$(awk -v a="$PER_rc_verbs" -v b="$PER_rc_gdr" 'BEGIN {
                 if (a + 0 > 0 && b != "FAIL") printf "%.3f", b / a
                 else print "-" }')"
    done
    echo "(ratio = rc_gdr / rc_verbs; below 1: rc_gdr executes fewer" \
         "instructions)"

    echo
    echo "raw: inclusive Ir of the op; progress calls and their Ir at its main call site:"
    for name in "${CASES[@]}"; do
        for tl in "${TLS[@]}"; do
            printf '  %-10s %-9s -n %-5s %s\n' "$name" "$tl" "$N1" \
                "${IR[$name.$tl.$N1]}"
            printf '  %-10s %-9s -n %-5s %s\n' "$name" "$tl" "$N2" \
                "${IR[$name.$tl.$N2]}"
        done
    done

    if [ "$failed" = 1 ]; then
        echo "bench-callgrind: some runs failed (FAIL above)" >&2
        exit 1
    fi
}

parse_args "$@"
if [ "$INSIDE" = 1 ]; then
    run_inside
else
    run_in_guest
fi
