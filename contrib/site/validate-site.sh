#!/bin/bash
#
# validate-site.sh: what a site with NVIDIA GPUs and RDMA NICs runs, after a
# build, before anyone may say "GPUDirect RDMA works here" (doc/DESIGN.md section 6a).
#
# Phases (each cell one file under OUT/cells, one row in OUT/summary.tsv):
#   env       kernel, driver versions, nvidia-smi (topo -m), ibv_devinfo,
#             IOMMU / ACS state, peermem module, ucx_info, and rc_gdr_info
#             (text and --json): OUT/env/
#   reg       contrib/site/reg_sweep per GPU x NIC x lane: cold / hit /
#             contained / partial / disjoint / realloc registrations, the
#             lane that really made them (md counters), times
#   data      contrib/site/data_check per GPU x NIC x lane (x flush
#             auto/always on GDR lanes): put/get zcopy GPU<->GPU, GPU->host
#             and host->GPU at unaligned addresses, byte-exact, NIC port
#             counters around it
#   bw        ucx_perftest -x rc_gdr -D zcopy with CUDA memory: put_bw and
#             get, NIC-reads-GPU and NIC-writes-GPU, per lane and size,
#             repeated (median / P95 / CV), NIC port counters and GPU PCIe
#             throughput sampled around each cell
#   baseline  the same with host memory on each NIC (no GPU involved)
#
# A lane is forced by rc_gdr's own knobs, so that a cell that asks for GDR
# cannot quietly fall back to the bounce lane (the md refuses to open and the
# cell says NOT-AVAILABLE with the gate's reason):
#   dmabuf   UCX_RC_GDR_REG_METHODS=dmabuf  UCX_RC_GDR_NIC_{READS,WRITES}_GPU=yes
#   peermem  UCX_RC_GDR_REG_METHODS=peermem UCX_RC_GDR_NIC_{READS,WRITES}_GPU=yes
#   bounce   UCX_RC_GDR_NIC_{READS,WRITES}_GPU=no UCX_RC_GDR_BOUNCE=yes
#   auto     none of them: what an application gets
#
# Verdicts: PASS (measured, and the path shown: lane from the registration
# trace, NIC counters moved by the payload), FAIL, UNVERIFIED (measured, but
# some evidence missing: the reason says which), NOT-AVAILABLE (the gate
# refuses that lane on that pair: a finding, with the gate's line),
# NOT-RUN (a prerequisite is missing), NOT-VERIFIABLE-EMULATED, PLANNED
# (--dry-run). With the emulated CUDA driver every verdict carries EMULATED.
# Nothing is PASS that was not measured.
#
# Exit status: 0 no cell failed (read the "could not verify" list: 0 does not
# mean everything was verified); 1 some cell failed; 2 usage error.
#
# No 'set -e': a command that fails inside a cell is a finding that the cell
# records, not a reason to abandon the rest of a long run.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

usage() {
    cat <<'EOF'
Usage: contrib/site/validate-site.sh [options]
  --out DIR         results directory (./validate-site-HOST-DATE)
  --gpus LIST       GPU indices, nvidia-smi / PCI order (all), e.g. 0,1
  --nics LIST       verbs devices, DEV or DEV:PORT (every device with an
                    ACTIVE port, its first active port), e.g. mlx5_0,mlx5_1:1
  --pairs MODE      GPU x NIC pairs for the bandwidth phase: nearest (the
                    NICs at the smallest PCIe distance from each GPU, from
                    rc_gdr_info) or all (nearest); reg and data run all pairs
  --lanes LIST      auto,dmabuf,peermem,bounce (all); bw leaves auto out
                    unless it is named explicitly
  --sizes LIST      bandwidth message sizes, K/M/G suffixes
                    (4K,64K,1M,16M,256M,1G)
  --iters N         most ucx_perftest iterations per run (2000); fewer for
                    large sizes, see --bytes; warm-up is a tenth
  --bytes SIZE      payload per run that sets the iteration count (32G):
                    long enough runs let the GPU PCIe sampling see them
  --repeat N        runs per bandwidth cell, for median / P95 / CV (3)
  --reg-size SIZE   range size for reg_sweep (4M); --reg-iters N (50)
  --phases LIST     env,reg,data,bw,baseline (all)
  --max-distance L  UCX_RC_GDR_MAX_DISTANCE for every cell (rc_gdr: PXB)
  --perftest PATH   ucx_perftest to use (the one in PATH); it needs the
                    cuda memory type: see the end of this text
  --peer HOST       run the ucx_perftest server on HOST (same repository
                    path, over ssh -o BatchMode=yes) so that data crosses the
                    wire; default: both processes here, on the same NIC
  --peer-nic DEV[:PORT]  the other end of the data cells (data_check opens
                    two NICs): with a second port on the fabric the data
                    crosses the wire; default: the tested NIC itself
  --port N          first TCP port for ucx_perftest (23500)
  --run-timeout S   limit of one ucx_perftest / test program run (300)
  --build DIR       build directory ($RC_GDR_BUILD or build)
  --emulated-gpu    use the project's stand-in CUDA driver (soft-RoCE guest);
                    every result is labelled EMULATED, bandwidth cells are
                    not verifiable
  --dry-run         print the plan and what could not be verified; runs
                    no test program (only looks at sysfs, nvidia-smi -L style
                    queries and ucx_perftest -h)
  -h, --help        this text

CUDA-enabled ucx_perftest: Debian's UCX 1.13.1 is built without CUDA, so its
ucx_perftest has no cuda memory type ("-m cuda" is refused). Build UCX
1.13.1 (the release rc_gdr is built for) with CUDA, e.g. from the tree that
contrib/ucx-deps.sh prepared:
    ./configure --prefix=/opt/ucx-1.13.1-cuda --with-cuda=/usr/local/cuda \
        --with-verbs --enable-mt && make -j install
and pass --perftest /opt/ucx-1.13.1-cuda/bin/ucx_perftest (with
LD_LIBRARY_PATH=/opt/ucx-1.13.1-cuda/lib so that it loads its own UCX).
rc_gdr follows the struct layouts of the UCX tree it was built against: if
that build's config.h differs from the one rc_gdr used (ucx_info -b), build
rc_gdr against the CUDA-enabled tree too (configure --with-ucx-src).
EOF
}

# --------------------------------------------------------------- options

OUT="" GPU_LIST="" NIC_LIST="" PAIRS=nearest LANE_LIST="" DRY=0 EMU=0
SIZE_LIST="4K,64K,1M,16M,256M,1G" ITERS=2000 BYTES_SPEC=32G REPEAT=3
REG_SIZE=4M REG_ITERS=50 PHASE_LIST="env,reg,data,bw,baseline"
MAX_DISTANCE="" PERFTEST="" PEER="" PEER_NIC="" PORT=23500 RUN_TIMEOUT=300
BUILD=${RC_GDR_BUILD:-$ROOT/build}
REMOTE_SH=${RC_GDR_VALIDATE_REMOTE_SH:-ssh -o BatchMode=yes}
ARGV=("$@")

# die (exit 2 here), bad_usage, is_number
CLI_NAME=validate-site CLI_DIE_STATUS=2
# shellcheck source=contrib/lib/cli.sh
. "$ROOT/contrib/lib/cli.sh"

# to_bytes 4K -> 4096 (K/M/G, optional iB/B); empty output when malformed
to_bytes() {
    local spec=$1 num unit
    [[ $spec =~ ^([0-9]+)([kKmMgG]?)(i?B)?$ ]] || return 0
    num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[2]}
    case $unit in
    k|K) echo $(( num << 10 )) ;;
    m|M) echo $(( num << 20 )) ;;
    g|G) echo $(( num << 30 )) ;;
    *)   echo "$num" ;;
    esac
}

# human 1048576 -> 1M
human() {
    local b=$1
    if (( b >= 1 << 30 && b % (1 << 30) == 0 )); then echo "$(( b >> 30 ))G"
    elif (( b >= 1 << 20 && b % (1 << 20) == 0 )); then echo "$(( b >> 20 ))M"
    elif (( b >= 1 << 10 && b % (1 << 10) == 0 )); then echo "$(( b >> 10 ))K"
    else echo "$b"; fi
}

parse_args() {
    local need
    while [ $# -gt 0 ]; do
        case $1 in
        --out|--gpus|--nics|--pairs|--lanes|--sizes|--iters|--bytes|\
        --repeat|--reg-size|--reg-iters|--phases|--max-distance|\
        --perftest|--peer|--peer-nic|--port|--run-timeout|--build)
            [ $# -ge 2 ] || bad_usage "$1 needs a value"
            need=$2
            case $1 in
            --out)          OUT=$need ;;
            --gpus)         GPU_LIST=$need ;;
            --nics)         NIC_LIST=$need ;;
            --pairs)        PAIRS=$need ;;
            --lanes)        LANE_LIST=$need ;;
            --sizes)        SIZE_LIST=$need ;;
            --iters)        ITERS=$need ;;
            --bytes)        BYTES_SPEC=$need ;;
            --repeat)       REPEAT=$need ;;
            --reg-size)     REG_SIZE=$need ;;
            --reg-iters)    REG_ITERS=$need ;;
            --phases)       PHASE_LIST=$need ;;
            --max-distance) MAX_DISTANCE=$need ;;
            --perftest)     PERFTEST=$need ;;
            --peer)         PEER=$need ;;
            --peer-nic)     PEER_NIC=$need ;;
            --port)         PORT=$need ;;
            --run-timeout)  RUN_TIMEOUT=$need ;;
            --build)        BUILD=$need ;;
            esac
            shift ;;
        --emulated-gpu) EMU=1 ;;
        --dry-run)      DRY=1 ;;
        -h|--help)      usage; exit 0 ;;
        *) bad_usage "unknown option '$1'" ;;
        esac
        shift
    done

    local n
    for n in ITERS REPEAT REG_ITERS PORT RUN_TIMEOUT; do
        is_number "${!n}" || bad_usage "--$(tr 'A-Z_' 'a-z-' <<<"$n") needs a positive number"
    done
    case $PAIRS in nearest|all) ;; *) bad_usage "--pairs: nearest or all" ;; esac
    BYTES=$(to_bytes "$BYTES_SPEC")
    [ -n "$BYTES" ] || bad_usage "--bytes: bad size '$BYTES_SPEC'"
    [ -n "$(to_bytes "$REG_SIZE")" ] || bad_usage "--reg-size: bad size '$REG_SIZE'"
    case ${MAX_DISTANCE^^} in
    ""|LOC|PIX|PXB|PHB|NODE|SYS) MAX_DISTANCE=${MAX_DISTANCE^^} ;;
    *) bad_usage "--max-distance: LOC, PIX, PXB, PHB, NODE or SYS" ;;
    esac

    local item
    SIZES=()
    IFS=, read -ra items <<<"$SIZE_LIST"
    for item in "${items[@]}"; do
        n=$(to_bytes "$item")
        if [ -z "$n" ] || [ "$n" -lt 1 ]; then bad_usage "--sizes: bad size '$item'"; fi
        SIZES+=("$n")
    done
    [ ${#SIZES[@]} -gt 0 ] || bad_usage "--sizes: empty"

    PHASES=" "
    IFS=, read -ra items <<<"$PHASE_LIST"
    for item in "${items[@]}"; do
        case $item in env|reg|data|bw|baseline) PHASES+="$item " ;;
        *) bad_usage "--phases: unknown phase '$item'" ;; esac
    done

    LANES=() BW_LANES=()
    IFS=, read -ra items <<<"${LANE_LIST:-auto,dmabuf,peermem,bounce}"
    for item in "${items[@]}"; do
        case $item in auto|dmabuf|peermem|bounce) LANES+=("$item") ;;
        *) bad_usage "--lanes: unknown lane '$item'" ;; esac
        if [ "$item" != auto ] || [ -n "$LANE_LIST" ]; then
            BW_LANES+=("$item")
        fi
    done
}

phase_on() { [[ $PHASES == *" $1 "* ]]; }

# ------------------------------------------------------------ reporting

CANNOT=()      # what could not be verified, one line each
VERIFIED=()    # what was, one line each
NOTES=()

cannot() {
    local line
    for line in "${CANNOT[@]}"; do [ "$line" != "$*" ] || return 0; done
    CANNOT+=("$*")
}

say() {
    if [ "$DRY" = 1 ] || [ -z "${LOG:-}" ]; then
        echo "$*"
    else
        echo "$*" | tee -a "$LOG"
    fi
}

EMU_TAG=""     # "-EMULATED" with the stand-in driver

# cell PHASE GPU NIC LANE OP SIZE VERDICT RESULT EVIDENCE FILE
cell() {
    local verdict=$7
    case $verdict in
    PASS|FAIL|UNVERIFIED) verdict+=$EMU_TAG ;;
    esac
    case $verdict in
    PASS*)         N_PASS=$(( N_PASS + 1 )) ;;
    FAIL*)         N_FAIL=$(( N_FAIL + 1 )) ;;
    UNVERIFIED*)   N_UNVER=$(( N_UNVER + 1 )) ;;
    NOT-AVAIL*)    N_NA=$(( N_NA + 1 )) ;;
    PLANNED)       N_PLAN=$(( N_PLAN + 1 )) ;;
    *)             N_NOTRUN=$(( N_NOTRUN + 1 )) ;;
    esac
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" \
        "$5" "$6" "$verdict" "$8" "$9" "${10}" >>"$SUMMARY_TSV"
    if [ "$DRY" = 0 ]; then
        say "$(printf '  %-8s %-5s %-10s %-7s %-20s %-5s %-24s %s' "$1" "$2" \
               "$3" "$4" "$5" "$6" "$verdict" "$8")"
    fi
}
N_PASS=0 N_FAIL=0 N_UNVER=0 N_NA=0 N_NOTRUN=0 N_PLAN=0

# -------------------------------------------------------------- discovery

GPUS=()                 # indices (nvidia-smi / PCI order)
declare -A GPU_NAME=() GPU_BDF=()
NICS=()                 # DEV:PORT
declare -A NIC_RATE=() NIC_PRESENT=()

discover_gpus() {
    local idx name bdf i=0 dev
    if [ "$EMU" = 1 ]; then
        HAVE_GPU=emulated
        for (( i = 0; i < ${RC_GDR_FAKE_CUDA_DEVICES:-1}; ++i )); do
            GPU_NAME[$i]="EMULATED (rc_gdr stand-in driver)"
            GPU_BDF[$i]=emulated
        done
    elif command -v nvidia-smi >/dev/null &&
         nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader \
             >"$TMP/gpus" 2>/dev/null && [ -s "$TMP/gpus" ]; then
        HAVE_GPU=nvidia-smi
        while IFS=, read -r idx name bdf; do
            GPU_NAME[${idx// /}]=${name# }
            GPU_BDF[${idx// /}]=${bdf# }
        done <"$TMP/gpus"
    else
        HAVE_GPU=""
        for dev in /sys/bus/pci/devices/*; do
            [ "$(cat "$dev/vendor" 2>/dev/null)" = 0x10de ] || continue
            case $(cat "$dev/class" 2>/dev/null) in 0x0302*|0x0300*) ;; *) continue ;; esac
            GPU_NAME[$i]="NVIDIA (no nvidia-smi)" GPU_BDF[$i]=${dev##*/}
            i=$(( i + 1 )) HAVE_GPU=sysfs
        done
    fi

    if [ -n "$GPU_LIST" ]; then
        IFS=, read -ra GPUS <<<"$GPU_LIST"
        for idx in "${GPUS[@]}"; do
            [[ $idx =~ ^[0-9]+$ ]] || bad_usage "--gpus: '$idx' is not an index"
            [ -n "${GPU_NAME[$idx]:-}" ] || GPU_NAME[$idx]="(not found here)"
            [ -n "${GPU_BDF[$idx]:-}" ] || GPU_BDF[$idx]="?"
        done
    else
        GPUS=()
        [ ${#GPU_NAME[@]} -eq 0 ] ||
            mapfile -t GPUS <<<"$(printf '%s\n' "${!GPU_NAME[@]}" | sort -n)"
    fi
}

nic_first_active_port() {
    local dev=$1 p
    for p in /sys/class/infiniband/"$dev"/ports/*; do
        [ -e "$p/state" ] || continue
        if grep -q ACTIVE "$p/state" 2>/dev/null; then echo "${p##*/}"; return; fi
    done
}

discover_nics() {
    local d dev port item
    HAVE_NIC=0
    for d in /sys/class/infiniband/*; do
        [ -d "$d" ] || continue
        dev=${d##*/} HAVE_NIC=1
        NIC_PRESENT[$dev]=1
        port=$(nic_first_active_port "$dev")
        if [ -z "$NIC_LIST" ] && [ -n "$port" ]; then NICS+=("$dev:$port"); fi
        if [ -z "$port" ] && [ -z "$NIC_LIST" ]; then
            NOTES+=("NIC $dev has no ACTIVE port: left out")
        fi
    done
    if [ -n "$NIC_LIST" ]; then
        IFS=, read -ra items <<<"$NIC_LIST"
        for item in "${items[@]}"; do
            dev=${item%%:*} port=${item#*:}
            [ "$port" != "$item" ] || port=$(nic_first_active_port "$dev")
            NICS+=("$dev:${port:-1}")
        done
    fi
    for item in "${NICS[@]}"; do
        dev=${item%%:*} port=${item#*:}
        NIC_RATE[$item]=$(cat "/sys/class/infiniband/$dev/ports/$port/rate" 2>/dev/null || echo "?")
    done
}

# Byte counters of a port: sets CNT_TX CNT_RX (files) CNT_MUL CNT_SRC,
# or CNT_SRC="" when none is readable.
counter_files() {
    local dev=${1%%:*} port=${1#*:} base ndev
    base=/sys/class/infiniband/$dev/ports/$port
    CNT_TX="" CNT_RX="" CNT_MUL=1 CNT_SRC=""
    if [ -r "$base/counters/port_xmit_data" ] &&
       cat "$base/counters/port_xmit_data" >/dev/null 2>&1; then
        # IB PortXmitData/PortRcvData count octets divided by 4
        CNT_TX=$base/counters/port_xmit_data CNT_RX=$base/counters/port_rcv_data
        CNT_MUL=4 CNT_SRC="port counters (port_xmit_data/port_rcv_data x 4)"
        return
    fi
    ndev=$(cat "$base/gid_attrs/ndevs/0" 2>/dev/null || true)
    if [ -n "$ndev" ] && [ -r "/sys/class/net/$ndev/statistics/tx_bytes" ]; then
        CNT_TX=/sys/class/net/$ndev/statistics/tx_bytes
        CNT_RX=/sys/class/net/$ndev/statistics/rx_bytes
        CNT_SRC="netdev $ndev tx_bytes/rx_bytes (no port byte counters; only"
        CNT_SRC+=" traffic the kernel's network stack carries)"
    fi
}

# counters_read NIC -> "tx rx" in bytes, or "- -"
counters_read() {
    counter_files "$1"
    if [ -z "$CNT_SRC" ]; then echo "- -"; return; fi
    local tx rx
    tx=$(cat "$CNT_TX" 2>/dev/null || echo -) rx=$(cat "$CNT_RX" 2>/dev/null || echo -)
    if [[ $tx =~ ^[0-9]+$ ]] && [[ $rx =~ ^[0-9]+$ ]]; then
        echo "$(( tx * CNT_MUL )) $(( rx * CNT_MUL ))"
    else
        echo "- -"
    fi
}

# ------------------------------------------------------------ preflight

PT_CUDA=0 PT_OK=0
preflight() {
    local k

    [ -n "$PERFTEST" ] || PERFTEST=$(command -v ucx_perftest || true)
    if [ -n "$PERFTEST" ] && [ -x "$PERFTEST" ]; then
        PT_OK=1
        if grep -Eq '^[[:space:]]+cuda[[:space:]]+-' <<<"$("$PERFTEST" -h 2>&1)"; then
            PT_CUDA=1
        fi
    fi

    if [ ! -f "$BUILD/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" ]; then
        cannot "no built rc_gdr module under $BUILD: build first (README.md);" \
               "nothing that loads it can run"
        HAVE_BUILD=0
    else
        HAVE_BUILD=1
    fi

    case $HAVE_GPU in
    emulated)   cannot "every GPU here is EMULATED (rc_gdr's stand-in CUDA" \
                       "driver: host memory behind device pointers): no NIC" \
                       "DMA into or out of GPU memory exists to verify; GPU" \
                       "results are about the cache, the gate and the bounce" \
                       "lane's plumbing only" ;;
    nvidia-smi) ;;
    sysfs)      cannot "NVIDIA GPUs are in sysfs but nvidia-smi does not answer:" \
                       "driver versions, topology and GPU PCIe throughput" \
                       "cannot be read" ;;
    *)          cannot "no GPU found (no nvidia-smi answer, no NVIDIA display" \
                       "or 3D controller in /sys/bus/pci): nothing about GPU" \
                       "memory can be verified" ;;
    esac
    [ "$HAVE_NIC" = 1 ] ||
        cannot "no RDMA NIC found (/sys/class/infiniband is empty or absent):" \
               "no registration, data or bandwidth cell can run"
    if [ "$HAVE_NIC" = 1 ] && [ ${#NICS[@]} -eq 0 ]; then
        cannot "no RDMA NIC has an ACTIVE port: no cell can run"
    fi
    for k in "${NICS[@]}"; do
        [ -n "${NIC_PRESENT[${k%%:*}]:-}" ] ||
            cannot "NIC ${k%%:*} (from --nics) is not on this machine"
    done

    if [ -n "$HAVE_GPU" ] && [ "$HAVE_GPU" != emulated ]; then
        if [ ! -e /sys/module/nvidia_peermem ] && [ ! -e /sys/module/nv_peer_mem ] &&
           [ ! -e /sys/kernel/mm/memory_peers/nv_mem ]; then
            cannot "no peermem module (nvidia_peermem / nv_peer_mem not loaded):" \
                   "the peermem lane cannot be verified (modprobe nvidia_peermem;" \
                   "the gate still proves it by a test registration)"
        fi
    fi
    if [ "$(printf '%s\n' "5.12" "$(uname -r)" | sort -V | head -n1)" != 5.12 ]; then
        cannot "kernel $(uname -r) is older than 5.12: no DMA-BUF import, the" \
               "DMA-BUF lane cannot be verified"
    fi

    if [ "$PT_OK" = 0 ]; then
        cannot "no ucx_perftest (install ucx-utils, or --perftest PATH):" \
               "no bandwidth cell can run"
    elif [ "$PT_CUDA" = 0 ]; then
        cannot "$PERFTEST has no cuda memory type (Debian's UCX 1.13.1 is" \
               "built without CUDA): GPU bandwidth cells cannot run; build" \
               "UCX 1.13.1 --with-cuda and pass --perftest (see --help)"
    fi

    local any_cnt=0 k2
    for k2 in "${NICS[@]}"; do
        counter_files "$k2"
        COUNTER_SRC[$k2]=$CNT_SRC
        if [ -n "$CNT_SRC" ]; then
            any_cnt=1
        elif [ -n "${NIC_PRESENT[${k2%%:*}]:-}" ]; then
            cannot "NIC $k2: no readable byte counters" \
                   "(/sys/class/infiniband/${k2%%:*}/ports/${k2#*:}/counters/port_xmit_data):" \
                   "no cell on it can show that data crossed the NIC, so none can PASS"
        fi
    done
    : "$any_cnt"
    if [ "$HAVE_GPU" = nvidia-smi ] && nvidia-smi dmon -h >/dev/null 2>&1; then
        HAVE_DMON=1
    else
        HAVE_DMON=0
        [ -z "$HAVE_GPU" ] || [ "$HAVE_GPU" = emulated ] ||
            cannot "GPU PCIe throughput cannot be sampled (no nvidia-smi dmon):" \
                   "that data entered or left the GPU is not shown"
    fi
    if [ ${#NICS[@]} -gt 0 ] && { phase_on bw || phase_on baseline; }; then
        [ -n "$PEER" ] ||
            cannot "ucx_perftest server and client share one NIC (loopback): an" \
                   "HCA may loop such traffic back internally without counting" \
                   "it in its port counters; use --peer HOST for traffic over" \
                   "the wire"
        cannot "ucx_perftest does not check the data it moves: correctness" \
               "comes from the data cells (data_check, 256 KiB byte-exact), not" \
               "from the bandwidth runs"
    fi
    if [ ${#NICS[@]} -gt 0 ] && phase_on data && [ -z "$PEER_NIC" ]; then
        cannot "data cells open the tested NIC at both ends (loopback); use" \
               "--peer-nic for a second port so that the data crosses the wire"
    fi
    cannot "IOMMU and ACS are tested only as found on this machine; other" \
           "settings the site may choose need another run"
}
declare -A COUNTER_SRC=()

# -------------------------------------------------------------- lanes

# lane_env LANE GPU -> the env(1) arguments of a cell in CELL_ENV
lane_env() {
    local lane=$1 gpu=$2
    CELL_ENV=(-u UCX_RC_GDR_REG_METHODS -u UCX_RC_GDR_NIC_READS_GPU
              -u UCX_RC_GDR_NIC_WRITES_GPU -u UCX_RC_GDR_REQUIRE
              -u UCX_RC_GDR_BOUNCE -u UCX_RC_GDR_FLUSH)
    case $lane in
    dmabuf|peermem)
        CELL_ENV+=("UCX_RC_GDR_REG_METHODS=$lane" UCX_RC_GDR_NIC_READS_GPU=yes
                   UCX_RC_GDR_NIC_WRITES_GPU=yes) ;;
    bounce)
        CELL_ENV+=(UCX_RC_GDR_NIC_READS_GPU=no UCX_RC_GDR_NIC_WRITES_GPU=no
                   UCX_RC_GDR_BOUNCE=yes) ;;
    esac
    [ -z "$MAX_DISTANCE" ] || CELL_ENV+=("UCX_RC_GDR_MAX_DISTANCE=$MAX_DISTANCE")
    # One GPU per process, numbered as nvidia-smi numbers it
    if [ "$EMU" = 0 ] && [ -n "$gpu" ]; then
        CELL_ENV+=(CUDA_DEVICE_ORDER=PCI_BUS_ID "CUDA_VISIBLE_DEVICES=$gpu")
    fi
}

# The ordinal a cell's process sees for GPU index $1
cell_ordinal() { if [ "$EMU" = 1 ]; then echo "$1"; else echo 0; fi; }

lane_knobs_text() {
    local a out=""
    for a in "${CELL_ENV[@]}"; do
        case $a in -u) ;; UCX_*=*|CUDA_*=*) out+="$a " ;; esac
    done
    echo "${out% }"
}

join_ev() { local out; out=$(printf '%s; ' "$@"); echo "${out%; }"; }

fname() { tr ':/ ' '---' <<<"$*" | tr -s '-'; }

declare -A REG_LANE=()   # "gpu|nic|lane" -> lane the registration trace showed

# gate_line FILE: the gate's line from a cell's output, a refusal first
gate_line() {
    local line
    line=$(grep -Eo 'rc_gdr: GPU[0-9]+ <-> [^ ]+ .* is refused \([^"]*' "$1" 2>/dev/null | head -n1)
    [ -n "$line" ] ||
        line=$(grep -Eo 'rc_gdr: GPU[0-9]+ <-> [^ ]+ .* uses the [^"]*' "$1" 2>/dev/null | head -n1)
    echo "$line"
}

# gate_refused FILE: did the gate refuse a forced lane in this output?
gate_refused() {
    grep -Eq 'rc_gdr: GPU[0-9]+ <-> [^ ]+ .* is refused \(' "$1" 2>/dev/null
}

run_logged() {  # run_logged FILE TIMEOUT CMD...: stdout+stderr to FILE, rc out
    local file=$1 limit=$2 rc=0
    shift 2
    {
        echo "# $(date -u +%FT%TZ) $*"
        echo
    } >>"$file"
    timeout -k 5 "$limit" "$@" </dev/null >>"$file" 2>&1 || rc=$?
    echo "$rc"
}

# ------------------------------------------------------------ env phase

phase_env() {
    local d=$OUT/env f
    mkdir -p "$d"
    say "== environment -> $d"
    {
        echo "date: $(date -u +%FT%TZ)"; echo "host: $(hostname)"
        echo "kernel: $(uname -a)"; echo "cmdline: $(cat /proc/cmdline 2>/dev/null)"
        grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release 2>/dev/null || true
        echo "validate-site.sh ${ARGV[*]}"
        echo "git: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo '?')"
        echo "emulated GPU: $([ "$EMU" = 1 ] && echo yes || echo no)"
        env | grep -E '^(UCX_|RC_GDR_|CUDA_|LD_PRELOAD)' | sort
    } >"$d/system.txt"

    capture() {  # capture FILE CMD...: output, or why it could not be taken
        local file=$1; shift
        if command -v "$1" >/dev/null 2>&1; then
            timeout 120 "$@" >"$d/$file" 2>&1 || echo "(exit status $?)" >>"$d/$file"
        else
            echo "($1 not installed)" >"$d/$file"
        fi
    }
    capture nvidia-smi.txt nvidia-smi
    capture nvidia-smi-q.txt nvidia-smi -q
    capture nvidia-smi-topo.txt nvidia-smi topo -m
    capture nvidia-smi-pcie.txt nvidia-smi --format=csv \
        --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max
    cat /proc/driver/nvidia/version >"$d/nvidia-driver.txt" 2>&1 ||
        echo "(no /proc/driver/nvidia/version: no NVIDIA kernel driver)" >"$d/nvidia-driver.txt"
    capture modinfo-nvidia.txt modinfo nvidia
    capture ibv_devinfo.txt ibv_devinfo -v
    capture ofed_info.txt ofed_info -s
    capture ucx_info-version.txt ucx_info -v
    capture ucx_info-rc_gdr.txt ucx_info -d
    capture ucx_info-config.txt ucx_info -c
    capture lspci-tree.txt lspci -tv
    {
        echo "# lsmod (RDMA, NVIDIA, peermem)"
        grep -E '^(nvidia|nv_peer|ib_|mlx|rdma|irdma|bnxt|rxe|siw)' /proc/modules 2>/dev/null || true
        local m
        for m in /sys/module/nvidia_peermem /sys/module/nv_peer_mem \
                 /sys/kernel/mm/memory_peers/nv_mem; do
            if [ -e "$m" ]; then echo "present: $m $(cat "$m/version" 2>/dev/null)"
            else echo "absent:  $m"; fi
        done
    } >"$d/peermem.txt"
    {
        echo "# kernel command line IOMMU settings"
        tr ' ' '\n' </proc/cmdline | grep -Ei 'iommu|acs|pci=' || echo "(none)"
        echo "# /sys/class/iommu"; ls /sys/class/iommu 2>/dev/null || echo "(none)"
        echo "# iommu groups: $(find /sys/kernel/iommu_groups -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)"
        local t
        for t in /sys/kernel/iommu_groups/*/type; do
            [ -e "$t" ] && echo "$t: $(cat "$t")"
        done | sort -u -t: -k2 | head -n 20
    } >"$d/iommu.txt"
    if command -v lspci >/dev/null; then
        lspci -vvv 2>/dev/null | grep -E '^[0-9a-f]|ACSCap|ACSCtl' >"$d/acs.txt" || true
        if ! grep -q ACSCtl "$d/acs.txt"; then
            echo "(no ACSCtl lines: no ACS capability, or lspci needs root to read capabilities)" >>"$d/acs.txt"
            [ "$(id -u)" = 0 ] ||
                cannot "ACS control bits (lspci -vvv needs root): see the" \
                       "ACS evidence of rc_gdr_info instead"
        fi
    else
        echo "(lspci not installed)" >"$d/acs.txt"
        cannot "ACS control bits: lspci is not installed (pciutils)"
    fi
    for f in "${NICS[@]}"; do
        counter_files "$f"
        echo "$f: ${CNT_SRC:-no byte counters}; rate ${NIC_RATE[$f]}" >>"$d/nic-counters.txt"
    done

    if [ "$HAVE_BUILD" = 1 ]; then
        local info=$BUILD/src/tools/rc_gdr_info
        CUDA_DEVICE_ORDER=PCI_BUS_ID "$info" >"$d/rc_gdr_info.txt" 2>&1 || true
        CUDA_DEVICE_ORDER=PCI_BUS_ID "$info" --json >"$d/rc_gdr_info.json" \
            2>"$d/rc_gdr_info.stderr" || true
        say "   rc_gdr_info: $(tail -n1 "$d/rc_gdr_info.txt")"
        VERIFIED+=("capability chain per GPU x NIC recorded: env/rc_gdr_info.txt, env/rc_gdr_info.json")
    fi
    if ! grep -q GPU0 "$d/nvidia-smi-topo.txt" 2>/dev/null; then
        cannot "GPU/NIC topology as NVIDIA sees it (nvidia-smi topo -m) was not recorded"
    fi
    say "   $(find "$d" -type f | wc -l) files"
}

# distance GPU NIC -> from rc_gdr_info --json (GPU numbered by PCI order)
pair_distance() {
    local json=$OUT/env/rc_gdr_info.json
    [ -s "$json" ] || { echo "?"; return; }
    grep -Eo "\"gpu\": \"GPU$1\", \"gpu_bdf\": \"[^\"]*\", \"nic\": \"${2%%:*}\", \"port\": ${2#*:}, \"status\": \"[^\"]*\", \"distance\": \"[A-Z]+\"" "$json" |
        head -n1 | sed 's/.*"distance": "\([A-Z]*\)"/\1/' | grep . || echo "?"
}

# ------------------------------------------------------------ reg phase

reg_cell() {
    local gpu=$1 nic=$2 lane=$3 base rc json txt verdict result evidence glane
    base=$OUT/cells/$(fname "reg__GPU${gpu}__${nic}__${lane}")
    json=$base.json txt=$base.txt
    lane_env "$lane" "$gpu"
    local sweep=$BUILD/contrib/site/reg_sweep
    local args=(--gpu "$(cell_ordinal "$gpu")" --size "$REG_SIZE" --iters "$REG_ITERS" "$nic")
    {
        echo "# reg cell: GPU $gpu (${GPU_NAME[$gpu]}) x $nic, lane $lane"
        echo "# knobs: $(lane_knobs_text)"
    } >"$txt"
    rc=$(run_logged "$txt" "$RUN_TIMEOUT" env "${CELL_ENV[@]}" "$sweep" "${args[@]}")
    timeout -k 5 "$RUN_TIMEOUT" env "${CELL_ENV[@]}" "$sweep" --json "${args[@]}" \
        </dev/null >"$json" 2>>"$txt"
    glane=$(grep -E '^cold ' "$txt" | awk '{ for (i = 1; i < NF; ++i) if ($i == "lane") print $(i + 1) }' | head -n1)
    evidence="cold lane ${glane:-?}; $(grep -c ' PASS' "$txt" || true) cases PASS"
    result=$(grep -E '^cold ' "$txt" | sed -n 's/.*reg median *\([0-9.]*\) us.*/cold reg median \1 us/p')
    result+="$(grep -E '^hit ' "$txt" | sed -n 's/.*reg median *\([0-9.]*\) us.*/, hit \1 us/p')"

    case $rc in
    0)
        if grep -q '^SKIP' "$txt"; then
            verdict=NOT-RUN evidence="$(grep -m1 '^SKIP' "$txt")"
        elif [ "$lane" != auto ] && [ "$glane" != "$lane" ]; then
            verdict=FAIL evidence="lane $lane forced, but registrations went to ${glane:-?}"
        else
            verdict=PASS
            REG_LANE["$gpu|$nic|$lane"]=$glane
        fi ;;
    1)  verdict=FAIL
        evidence="$(grep -E ' FAIL ' "$txt" | head -n1 | cut -c1-160)" ;;
    3)  verdict=NOT-AVAILABLE evidence="$(gate_line "$txt")"
        [ -n "$evidence" ] || evidence="md did not open: $(grep -m1 'did not open' "$txt")" ;;
    124|137) verdict=FAIL evidence="timed out after $RUN_TIMEOUT s" ;;
    *)  verdict=NOT-RUN evidence="reg_sweep exit $rc: $(grep -m1 'reg_sweep:' "$txt" || true)" ;;
    esac
    cell reg "GPU$gpu" "$nic" "$lane" "cold..realloc" "$(human "$(to_bytes "$REG_SIZE")")" \
        "$verdict" "${result:--}" "$evidence" "${txt#"$OUT"/}"
}

# ------------------------------------------------------------ data phase

# The data cells' program (contrib/site/data_check.c): two rc_gdr endpoints
# of one process, on the tested NIC and its peer; it prints "lane of GPU
# memory on DEV: ...", one "PASS name" / "FAIL name" line per check, and
# "data_check: N passed, N failed" at the end (or "SKIP: why"); exit 3 when
# an md does not open (a forced lane the gate refuses)
DATA_SIZE=256K

data_cmd_text() {  # data_cmd_text GPU NIC: the command of a data cell, to show
    echo "data_check --gpu $(cell_ordinal "$1") --size $(to_bytes "$DATA_SIZE")" \
         "$2 $(data_peer "$2")"
}

data_peer() {  # data_peer NIC: the other end, DEV:PORT
    local peer=${PEER_NIC:-$1}
    [[ $peer == *:* ]] || peer=$peer:1
    echo "$peer"
}

data_cell() {
    local gpu=$1 nic=$2 lane=$3 flush=$4 base rc verdict evidence before after
    local tx0 rx0 tx1 rx1 moved lanes passed failed
    base=$OUT/cells/$(fname "data__GPU${gpu}__${nic}__${lane}__flush-${flush}")
    lane_env "$lane" "$gpu"
    [ "$flush" = default ] || CELL_ENV+=("UCX_RC_GDR_FLUSH=$flush")
    {
        echo "# data cell: GPU $gpu (${GPU_NAME[$gpu]}) x $nic, lane $lane, flush $flush"
        echo "# knobs: $(lane_knobs_text)"
    } >"$base.txt"
    before=$(counters_read "$nic")
    rc=$(run_logged "$base.txt" "$RUN_TIMEOUT" env "${CELL_ENV[@]}" \
         "$BUILD/contrib/site/data_check" --gpu "$(cell_ordinal "$gpu")" \
         --size "$(to_bytes "$DATA_SIZE")" \
         --timeout "$(( RUN_TIMEOUT / 4 > 1 ? RUN_TIMEOUT / 4 : 1 ))" \
         "$nic" "$(data_peer "$nic")")
    after=$(counters_read "$nic")
    read -r tx0 rx0 <<<"$before"; read -r tx1 rx1 <<<"$after"
    echo "# NIC $nic counters (${COUNTER_SRC[$nic]:-none}): before $before after $after" >>"$base.txt"

    read -r passed failed < <(sed -n 's/^data_check: \([0-9]*\) passed, \([0-9]*\) failed.*/\1 \2/p' "$base.txt" | tail -n1)
    lanes=$(grep -m1 '^lane of GPU memory' "$base.txt" | sed 's/.*: //' || true)
    if [ "$tx0" != - ] && [ "$tx1" != - ]; then
        moved=$(( tx1 - tx0 ))
        evidence="NIC tx $(( moved / 1024 )) KiB rx $(( (rx1 - rx0) / 1024 )) KiB"
    else
        moved="" evidence="NIC counters unreadable"
    fi
    evidence+="; registrations: ${lanes:-?}"

    # a forced lane the gate refuses: the md does not open
    if [ "$rc" = 3 ] || gate_refused "$base.txt"; then
        verdict=NOT-AVAILABLE evidence=$(gate_line "$base.txt")
        [ -n "$evidence" ] || evidence="md did not open: $(grep -m1 'did not open' "$base.txt")"
    elif [ "$rc" = 0 ] && grep -q '^SKIP' "$base.txt"; then
        verdict=NOT-RUN evidence="$(grep -m1 '^SKIP' "$base.txt" | cut -c1-160)"
    elif [ "$rc" != 0 ] || [ -z "$failed" ] || [ "$failed" != 0 ]; then
        verdict=FAIL
        evidence="exit $rc, ${failed:-?} failed: $(grep -m1 -E '^FAIL |^data_check: ' "$base.txt" | cut -c1-120)"
    elif [ "$lane" != auto ] && ! grep -Eq "$lane [1-9]" <<<"$lanes"; then
        verdict=FAIL evidence="lane $lane forced, registrations: ${lanes:-?}"
    elif [ -z "$moved" ]; then
        verdict=UNVERIFIED evidence+="; byte-exact, but no NIC counter shows the data crossed the NIC"
    elif [ "$moved" -lt 524288 ]; then
        verdict=UNVERIFIED evidence+="; byte-exact, but the NIC counters moved less than the 512 KiB sent (HCA-internal loopback?)"
    else
        verdict=PASS
    fi
    cell data "GPU$gpu" "$nic" "$lane" "put/get flush=$flush" "$DATA_SIZE" "$verdict" \
        "${passed:-0} checks passed" "$evidence" "${base#"$OUT"/}.txt"
}

# ------------------------------------------------------------- bw phase

# The operations: ucx_perftest test, memory types (initiator, target), the
# direction the GPU memory is accessed in, and where the GPU is.
OPS=(put.reads put.writes get.writes get.reads)
declare -A OP_TEST=([put.reads]=put_bw [put.writes]=put_bw [get.writes]=get [get.reads]=get)
declare -A OP_MEM=([put.reads]="cuda,host" [put.writes]="host,cuda"
                   [get.writes]="cuda,host" [get.reads]="host,cuda")
declare -A OP_DIR=([put.reads]=nic_reads_gpu [put.writes]=nic_writes_gpu
                   [get.writes]=nic_writes_gpu [get.reads]=nic_reads_gpu)
declare -A OP_GPU_SIDE=([put.reads]=initiator [put.writes]=target
                        [get.writes]=initiator [get.reads]=target)

iters_for() {  # iters_for SIZE
    local n=$(( BYTES / $1 ))
    (( n <= ITERS )) || n=$ITERS
    (( n >= 5 )) || n=5
    echo "$n"
}

# perftest_pair, perftest_final
# shellcheck source=contrib/lib/perftest.sh
. "$ROOT/contrib/lib/perftest.sh"

# perftest_run LOG MEM TEST SIZE ITERS PORT: one server/client pair
# (perftest_pair), here or with the server on --peer; prints the overall
# bandwidth in MB/s, or nothing
perftest_run() {
    local log=$1 mem=$2 test=$3 size=$4 n=$5 port=$6 rc=0
    local -a server
    local w=$(( n / 10 > 0 ? n / 10 : 1 ))
    local client=("$PERFTEST" "${PEER:-127.0.0.1}" -p "$port" -x rc_gdr -d "$NIC_CUR"
                  -t "$test" -D zcopy -s "$size" -n "$n" -w "$w" -m "$mem")
    {
        echo "## server: env ${CELL_ENV[*]} $PERFTEST -p $port${PEER:+ (on $PEER)}"
        echo "## client: env ${CELL_ENV[*]} ${client[*]}"
    } >>"$log"
    # shellcheck disable=SC2034  # server: passed by name
    if [ -n "$PEER" ]; then
        local remote
        remote="cd $(printf %q "$ROOT") && . contrib/env.sh $([ "$EMU" = 1 ] && echo --emulated-gpu) >/dev/null &&"
        remote+=" exec timeout -k 5 $RUN_TIMEOUT env $(printf '%q ' "${CELL_ENV[@]}") $(printf %q "$PERFTEST") -p $port"
        # shellcheck disable=SC2206  # REMOTE_SH is a command line
        server=($REMOTE_SH "$PEER" "$remote")
    else
        server=(env "${CELL_ENV[@]}" "$PERFTEST" -p "$port")
    fi
    client=(env "${CELL_ENV[@]}" "${client[@]}")
    perftest_pair "$port" "$RUN_TIMEOUT" "$log.server" "$log" server client \
        "${PEER:+$REMOTE_SH $PEER}" || rc=$?
    { echo "## server output:"; sed 's/^/   /' "$log.server"; } >>"$log"
    rm -f "$log.server"
    echo "## client exit status $rc" >>"$log"
    [ "$rc" = 0 ] || return 0
    perftest_final 7 "$log"    # overall MB/s
}

# stats V...: "median p95 cv" of the values (p95: nearest rank)
stats() {
    printf '%s\n' "$@" | sort -g | awk '
        { v[NR] = $1; s += $1; q += $1 * $1 }
        END {
            if (NR == 0) exit
            med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            r = int(0.95 * NR); if (r < 0.95 * NR) r++; if (r < 1) r = 1
            m = s / NR; var = (NR > 1) ? (q - NR * m * m) / (NR - 1) : 0
            if (var < 0) var = 0
            printf "%.1f %.1f %.3f\n", med, v[r], (m > 0) ? sqrt(var) / m : 0
        }'
}

mbs_to_gbits() { awk -v v="$1" 'BEGIN { printf "%.1f", v * 1048576 * 8 / 1e9 }'; }

dmon_start() {  # dmon_start GPU FILE
    DMON_PID=""
    [ "$HAVE_DMON" = 1 ] || return 0
    nvidia-smi dmon -i "$1" -s t -d 1 >"$2" 2>&1 &
    DMON_PID=$!
}

dmon_stop() {
    [ -n "${DMON_PID:-}" ] || return 0
    kill "$DMON_PID" 2>/dev/null || true
    wait "$DMON_PID" 2>/dev/null || true
    DMON_PID=""
}

# dmon_peak FILE -> "samples peak_rx peak_tx" (MB/s)
dmon_peak() {
    awk '!/^#/ && NF >= 3 && $2 ~ /^[0-9]+$/ {
            n++; if ($2 > rx) rx = $2; if ($3 > tx) tx = $3 }
         END { printf "%d %d %d\n", n, rx, tx }' "$1" 2>/dev/null || echo "0 0 0"
}

bw_cell() {  # bw_cell GPU|"" NIC LANE OP SIZE
    local gpu=$1 nic=$2 lane=$3 op=$4 size=$5 n log base i v vals=() t0 t1
    local before after tx0 rx0 tx1 rx1 dtx drx payload med p95 cv ev=() verdict
    local label mem test dir gpu_tag
    n=$(iters_for "$size")
    if [ -n "$gpu" ]; then
        mem=${OP_MEM[$op]} test=${OP_TEST[$op]} dir=${OP_DIR[$op]} gpu_tag=GPU$gpu
        label="$test ${dir}"
    else
        mem=host,host test=${op%%.*}; [ "$test" = put ] && test=put_bw
        dir=host gpu_tag=- label="$test host"
    fi
    base=$OUT/cells/$(fname "${gpu:+bw}${gpu:-baseline}__${gpu_tag}__${nic}__${lane}__${op}__$(human "$size")")
    log=$base.txt
    lane_env "$lane" "$gpu"
    NIC_CUR=$nic

    if [ "$DRY" = 1 ]; then
        cell "${gpu:+bw}${gpu:-baseline}" "$gpu_tag" "$nic" "$lane" "$label" "$(human "$size")" \
            PLANNED "-n $n x $REPEAT" "env $(lane_knobs_text) ucx_perftest -t $test -D zcopy -m $mem -s $size" "-"
        return
    fi

    {
        echo "# ${gpu:+bw}${gpu:-baseline} cell: ${gpu_tag} x $nic, lane $lane, $label, -m $mem,"
        echo "#   size $size, $n iterations (+$(( n / 10 > 0 ? n / 10 : 1 )) warm-up), $REPEAT runs"
        echo "# knobs: $(lane_knobs_text)"
        echo "# NIC counters: ${COUNTER_SRC[$nic]:-none}"
    } >"$log"

    before=$(counters_read "$nic")
    [ -z "$gpu" ] || dmon_start "$gpu" "$base.dmon"
    t0=$(date +%s.%N)
    for (( i = 1; i <= REPEAT; ++i )); do
        echo "## run $i" >>"$log"
        v=$(perftest_run "$log" "$mem" "$test" "$size" "$n" "$PORT")
        PORT=$(( PORT + 1 ))
        [ -z "$v" ] || vals+=("$v")
    done
    t1=$(date +%s.%N)
    dmon_stop
    after=$(counters_read "$nic")
    read -r tx0 rx0 <<<"$before"; read -r tx1 rx1 <<<"$after"
    payload=$(( size * (n + (n / 10 > 0 ? n / 10 : 1)) * ${#vals[@]} ))
    echo "# NIC $nic: before $before after $after; payload of the completed runs $payload bytes" >>"$log"

    if [ ${#vals[@]} -eq 0 ]; then
        if gate_refused "$log"; then
            verdict=NOT-AVAILABLE ev=("$(gate_line "$log")")
        elif grep -Eiq 'unsupported memory type|memory type.*(not supported|cuda)' "$log"; then
            verdict=NOT-RUN ev=("ucx_perftest cannot allocate $mem memory")
        else
            verdict=FAIL ev=("no run completed: $(grep -m1 -iE 'error|failed|refused|timed out' "$log" | cut -c1-140)")
        fi
        cell "${gpu:+bw}${gpu:-baseline}" "$gpu_tag" "$nic" "$lane" "$label" "$(human "$size")" \
            "$verdict" "-" "${ev[*]}" "${log#"$OUT"/}"
        return
    fi

    read -r med p95 cv <<<"$(stats "${vals[@]}")"
    echo "# bandwidth MB/s per run: ${vals[*]}; median $med p95 $p95 cv $cv" >>"$log"
    local result
    result="$(mbs_to_gbits "$med") Gb/s med, p95 $(mbs_to_gbits "$p95"), cv $cv"
    [ ${#vals[@]} -eq "$REPEAT" ] || result+=" (${#vals[@]}/$REPEAT runs)"

    # Did the data cross the NIC? Both directions count on one NIC in
    # loopback; with a peer, put leaves and get arrives.
    local nic_ok=""
    if [ "$tx0" = - ] || [ "$tx1" = - ]; then
        ev+=("NIC counters unreadable")
    else
        dtx=$(( tx1 - tx0 )) drx=$(( rx1 - rx0 ))
        ev+=("NIC tx $(( dtx >> 20 )) MiB rx $(( drx >> 20 )) MiB for $(( payload >> 20 )) MiB")
        local need=$(( payload * 9 / 10 ))
        if [ -n "$PEER" ]; then
            if [ "$test" = put_bw ]; then [ "$dtx" -ge "$need" ] && nic_ok=1
            else [ "$drx" -ge "$need" ] && nic_ok=1; fi
        else
            [ "$dtx" -ge "$need" ] && [ "$drx" -ge "$need" ] && nic_ok=1
        fi
        [ -n "$nic_ok" ] || nic_ok=0
        if [ "$nic_ok" = 1 ] && [ "$dtx" -gt $(( payload * 3 + (64 << 20) )) ]; then
            ev+=("counters moved 3x the payload: other traffic on the port?")
        fi
    fi

    # Did it enter or leave the GPU? (sampled rate: only runs of a few
    # seconds are seen)
    local gpu_ok=""
    if [ -n "$gpu" ] && [ -s "$base.dmon" ]; then
        local samples prx ptx peak secs want
        read -r samples prx ptx <<<"$(dmon_peak "$base.dmon")"
        secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%d", b - a }')
        if [ "$dir" = nic_reads_gpu ]; then peak=$ptx; else peak=$prx; fi
        want=$(awk -v m="$med" 'BEGIN { printf "%d", m / 4 }')
        if [ "${OP_GPU_SIDE[$op]}" = target ] && [ -n "$PEER" ]; then
            ev+=("GPU on the peer: its PCIe not sampled")
        elif [ "$samples" -ge 3 ] && [ "$peak" -ge "$want" ]; then
            gpu_ok=1 ev+=("GPU PCIe $([ "$dir" = nic_reads_gpu ] && echo tx || echo rx) peak $peak MB/s")
        elif [ "$samples" -ge 3 ] && [ "$secs" -ge 5 ]; then
            gpu_ok=0 ev+=("GPU PCIe peak $peak MB/s over $samples samples: GPU memory not seen moving")
        else
            ev+=("GPU PCIe: $samples samples in ${secs}s, too short to show")
        fi
    fi

    # The lane: proven by the registration trace of the reg phase under the
    # same knobs (a forced GDR lane refuses rather than falls back)
    local lane_ok=""
    if [ -n "$gpu" ]; then
        local seen=${REG_LANE["$gpu|$nic|$lane"]:-}
        if [ -n "$seen" ]; then
            lane_ok=1 ev+=("lane: reg trace $seen")
        else
            ev+=("lane: no registration trace for this GPU x NIC x lane")
        fi
    fi

    if [ "$nic_ok" = 0 ] || [ "$gpu_ok" = 0 ]; then
        if [ "$gpu_ok" = 0 ]; then verdict=FAIL
        elif [ -n "$PEER" ]; then verdict=UNVERIFIED ev+=("NIC counters did not move by the payload")
        else verdict=UNVERIFIED ev+=("NIC counters did not move by the payload (HCA-internal loopback? try --peer)"); fi
    elif [ "$nic_ok" = 1 ] && { [ -z "$gpu" ] || [ "$lane_ok" = 1 ]; }; then
        verdict=PASS
    else
        verdict=UNVERIFIED
    fi
    if [ -n "$gpu" ] && [ "$size" -ge $(( 8 << 20 )) ] && [ "$lane" != bounce ]; then
        ev+=("context: $(floor_context "$gpu" "$med")")
    fi
    cell "${gpu:+bw}${gpu:-baseline}" "$gpu_tag" "$nic" "$lane" "$label" "$(human "$size")" \
        "$verdict" "$result" "$(join_ev "${ev[@]}")" "${log#"$OUT"/}"
}

# The field's healthy-node floors (Azure health checks, ib_write_bw
# --use_cuda, 8 MiB, loopback): context, never a verdict.
floor_context() {
    local name=${GPU_NAME[$1]} gbits
    gbits=$(mbs_to_gbits "$2")
    case $name in
    *A100*)      echo "$gbits Gb/s vs field floor 185 Gb/s (A100+HDR)" ;;
    *H100*|*H200*) echo "$gbits Gb/s vs field floor 375 Gb/s (H100+NDR)" ;;
    *)           echo "$gbits Gb/s; field floors: A100+HDR 185, H100+NDR 375 Gb/s" ;;
    esac
}

# -------------------------------------------------------------- driver

bw_pairs() {  # prints "GPU NIC" lines for the bandwidth phase
    local g n d best
    for g in "${GPUS[@]}"; do
        if [ "$PAIRS" = all ] || [ "$DRY" = 1 ]; then
            for n in "${NICS[@]}"; do echo "$g $n"; done
            continue
        fi
        declare -A dist=()
        best=""
        for n in "${NICS[@]}"; do
            d=$(pair_distance "$g" "$n")
            dist[$n]=$d
            case $d in LOC) d=0 ;; PIX) d=1 ;; PXB) d=2 ;; PHB) d=3 ;;
                       NODE) d=4 ;; SYS) d=5 ;; *) d=9 ;; esac
            dist[$n]=$d
            if [ -z "$best" ] || [ "$d" -lt "$best" ]; then best=$d; fi
        done
        for n in "${NICS[@]}"; do
            [ "${dist[$n]}" != "$best" ] || echo "$g $n"
        done
        unset dist
    done
}

print_plan() {
    local g n
    say "== plan"
    say "   GPUs: $( [ ${#GPUS[@]} -gt 0 ] && for g in "${GPUS[@]}"; do printf '%s ' "$g=${GPU_NAME[$g]} (${GPU_BDF[$g]})"; done || echo "none found")"
    say "   NICs: $( [ ${#NICS[@]} -gt 0 ] && for n in "${NICS[@]}"; do printf '%s ' "$n (${NIC_RATE[$n]}; bytes from ${COUNTER_SRC[$n]:-nothing: no counters})"; done || echo "none found")"
    say "   lanes: ${LANES[*]} (bandwidth: ${BW_LANES[*]}); sizes: $(for n in "${SIZES[@]}"; do printf '%s ' "$(human "$n")"; done)"
    say "   ucx_perftest: ${PERFTEST:-none} (cuda memory: $([ "$PT_CUDA" = 1 ] && echo yes || echo NO))"
    say "   runs per bandwidth cell: $REPEAT; iterations: min($ITERS, $BYTES_SPEC / size), at least 5"
    say "   bandwidth pairs: $PAIRS$([ "$PAIRS" = nearest ] && echo " (nearest NICs per GPU, by rc_gdr_info's distance, decided at run time; the plan lists every pair)")"
    say "   ucx_perftest server: ${PEER:-this host, same NIC (loopback)}"
    say "   phases:$PHASES-> ${OUT:-(results directory)}"
    if phase_on env; then
        say "   env: system, nvidia-smi (-q, topo -m, pcie), NVIDIA driver, modinfo nvidia,"
        say "        ibv_devinfo -v, ofed_info, ucx_info (-v, -d, -c), lspci -tv, peermem,"
        say "        IOMMU, ACS (lspci -vvv), NIC counters, rc_gdr_info (text and --json)"
    fi
    local nreg=0 ndata=0 nbw=0 nbase=0 lane k
    if [ ${#GPUS[@]} -gt 0 ] && [ ${#NICS[@]} -gt 0 ]; then
        nreg=$(( ${#GPUS[@]} * ${#NICS[@]} * ${#LANES[@]} ))
        for lane in "${LANES[@]}"; do
            if [ "$lane" = bounce ]; then k=1; else k=2; fi
            ndata=$(( ndata + ${#GPUS[@]} * ${#NICS[@]} * k ))
        done
        nbw=$(( ${#GPUS[@]} * ${#NICS[@]} * ${#BW_LANES[@]} * ${#OPS[@]} * ${#SIZES[@]} ))
    fi
    nbase=$(( ${#NICS[@]} * 2 * ${#SIZES[@]} ))
    phase_on reg || nreg=0; phase_on data || ndata=0
    phase_on bw || nbw=0; phase_on baseline || nbase=0
    say "   cells: reg $nreg (reg_sweep -s $REG_SIZE -n $REG_ITERS), data $ndata (data_check NIC PEER-NIC," \
        "flush default and always on GDR lanes), bw $nbw (at most; x $REPEAT runs), baseline $nbase"
}

run_phases() {
    local g n lane op s flush
    if phase_on reg; then
        say "== reg: registration sweeps (reg_sweep)"
        if [ ${#GPUS[@]} -eq 0 ] || [ ${#NICS[@]} -eq 0 ] || [ "$HAVE_BUILD" = 0 ]; then
            cell reg - - - - - NOT-RUN "-" "no GPU, no NIC or no build" "-"
        fi
        for g in "${GPUS[@]}"; do for n in "${NICS[@]}"; do for lane in "${LANES[@]}"; do
            [ "$HAVE_BUILD" = 1 ] || continue
            if [ "$DRY" = 1 ]; then
                lane_env "$lane" "$g"
                cell reg "GPU$g" "$n" "$lane" cold..realloc "$REG_SIZE" PLANNED "-" \
                    "env $(lane_knobs_text) reg_sweep --json --gpu $(cell_ordinal "$g") -s $REG_SIZE -n $REG_ITERS $n" "-"
            else
                reg_cell "$g" "$n" "$lane"
            fi
        done; done; done
    fi

    if phase_on data; then
        say "== data: byte-exact GPU put/get (data_check)"
        if [ ${#GPUS[@]} -eq 0 ] || [ ${#NICS[@]} -eq 0 ] || [ "$HAVE_BUILD" = 0 ]; then
            cell data - - - - - NOT-RUN "-" "no GPU, no NIC or no build" "-"
        fi
        for g in "${GPUS[@]}"; do for n in "${NICS[@]}"; do for lane in "${LANES[@]}"; do
            [ "$HAVE_BUILD" = 1 ] || continue
            for flush in default always; do
                [ "$lane" != bounce ] || [ "$flush" = default ] || continue
                if [ "$DRY" = 1 ]; then
                    lane_env "$lane" "$g"
                    [ "$flush" = default ] || CELL_ENV+=("UCX_RC_GDR_FLUSH=$flush")
                    cell data "GPU$g" "$n" "$lane" "put/get flush=$flush" 256K PLANNED "-" \
                        "env $(lane_knobs_text) $(data_cmd_text "$g" "$n")" "-"
                else
                    data_cell "$g" "$n" "$lane" "$flush"
                fi
            done
        done; done; done
    fi

    if phase_on bw; then
        say "== bw: GPU bandwidth, ucx_perftest -x rc_gdr -D zcopy (GDR vs bounce)"
        local why=""
        [ "$EMU" = 0 ] || why="NOT-VERIFIABLE-EMULATED"
        if [ -z "$why" ] && { [ "$PT_OK" = 0 ] || [ "$PT_CUDA" = 0 ]; }; then why=NOT-RUN; fi
        if [ ${#GPUS[@]} -eq 0 ] || [ ${#NICS[@]} -eq 0 ]; then
            cell bw - - - - - NOT-RUN "-" "no GPU or no NIC" "-"
        fi
        while read -r g n <&3; do
            [ -n "$g" ] || continue
            for lane in "${BW_LANES[@]}"; do for op in "${OPS[@]}"; do for s in "${SIZES[@]}"; do
                if [ -n "$why" ]; then
                    local reason="ucx_perftest without cuda memory: see --help"
                    [ "$why" = NOT-RUN ] || reason="emulated GPU: host memory behind device pointers, no NIC<->GPU DMA to measure"
                    cell bw "GPU$g" "$n" "$lane" "${OP_TEST[$op]} ${OP_DIR[$op]}" "$(human "$s")" \
                        "$why" "-" "$reason" "-"
                else
                    bw_cell "$g" "$n" "$lane" "$op" "$s"
                fi
            done; done; done
        done 3<<<"$(bw_pairs)"
    fi

    if phase_on baseline; then
        say "== baseline: host memory, ucx_perftest -x rc_gdr -D zcopy (no GPU)"
        for n in "${NICS[@]}"; do for op in put get; do for s in "${SIZES[@]}"; do
            if [ "$PT_OK" = 0 ] || [ "$HAVE_BUILD" = 0 ]; then
                cell baseline - "$n" host "$op host" "$(human "$s")" NOT-RUN "-" "no ucx_perftest or no build" "-"
            else
                bw_cell "" "$n" host "$op.host" "$s"
            fi
        done; done; done
    fi
}

summarize() {
    local f line v note
    if [ "$DRY" = 1 ]; then f=$TMP/summary.txt; else f=$OUT/summary.txt; fi
    {
        echo "== summary ($( [ "$DRY" = 1 ] && echo "DRY RUN: nothing was run" || echo "$OUT"))"
        [ "$EMU" = 0 ] || echo "   ** EMULATED GPU: every GPU result below is about rc_gdr's stand-in CUDA driver **"
        if [ "$DRY" = 0 ]; then
            { column -t -s $'\t' "$SUMMARY_TSV" 2>/dev/null || cat "$SUMMARY_TSV"; } | cut -c1-250
            echo "(one file per cell under cells/; every column in summary.tsv)"
        fi
        echo
        echo "cells: $N_PASS PASS, $N_FAIL FAIL, $N_UNVER UNVERIFIED, $N_NA NOT-AVAILABLE," \
             "$N_NOTRUN not run / not verifiable, $N_PLAN planned"
        echo
        if [ "$DRY" = 0 ]; then
            echo "VERIFIED here (measured, with the evidence in the cell files):"
            awk -F'\t' 'NR > 1 && $7 ~ /^PASS/ { c[$1 " " $7]++ }
                        END { for (p in c) printf "  - %s: %d cells\n", p, c[p] }' "$SUMMARY_TSV" | sort
            for v in "${VERIFIED[@]}"; do echo "  - $v"; done
            [ "$N_PASS" -gt 0 ] || echo "  - no cell passed"
            [ "$EMU" = 0 ] || echo "  (EMULATED: a PASS-EMULATED cell verifies rc_gdr's logic on a stand-in driver, not GPUDirect RDMA)"
            echo
            if [ "$N_FAIL" -gt 0 ]; then
                echo "FAILED:"
                awk -F'\t' 'NR > 1 && $7 ~ /^FAIL/ { printf "  - %s %s %s %s %s %s: %s (%s)\n", $1, $2, $3, $4, $5, $6, substr($9, 1, 200), $10 }' \
                    "$SUMMARY_TSV" | head -n 40
                echo
            fi
        fi
        echo "could NOT verify$( [ "$DRY" = 1 ] && echo " (as far as can be told without running anything)"):"
        for line in "${CANNOT[@]}"; do echo "  - $line"; done
        awk -F'\t' 'NR > 1 && $7 !~ /^(PASS|PLANNED|FAIL)/ { k = $1 " " $7; c[k]++; if (!(k in r)) r[k] = $9 }
                    END { for (k in c) printf "  - %s: %d cells (e.g. %s)\n", k, c[k], substr(r[k], 1, 200) }' \
            "$SUMMARY_TSV" | sort
        for note in "${NOTES[@]}"; do echo "  - note: $note"; done
        echo
        echo "Field floors, context only (Azure health checks, ib_write_bw --use_cuda, 8 MiB, loopback):"
        echo "  A100+HDR >= 185 Gb/s, H100+NDR >= 375 Gb/s. No bandwidth is a verdict: faster alone proves nothing."
    } >"$f"
    cat "$f"
    [ "$DRY" = 1 ] || cat "$f" >>"$LOG"
}

# shellcheck disable=SC2317  # run from the EXIT trap
cleanup() {
    dmon_stop
    rm -rf "$TMP"
}

main() {
    parse_args "$@"
    TMP=$(mktemp -d) || die "mktemp failed"
    trap cleanup EXIT
    trap 'exit 130' INT TERM
    export CUDA_DEVICE_ORDER=PCI_BUS_ID

    # The module, and with --emulated-gpu the stand-in driver, in every
    # program the cells start
    if [ -f "$BUILD/src/uct/ib_gdr/.libs/libuct_ib_gdr.so" ]; then
        local env_args=("$BUILD")
        [ "$EMU" = 0 ] || env_args=(--emulated-gpu "$BUILD")
        # shellcheck disable=SC1091  # contrib/env.sh, found through $ROOT
        . "$ROOT/contrib/env.sh" "${env_args[@]}" >/dev/null
        BUILD=$RC_GDR_BUILD
    fi
    [ "${RC_GDR_GPU_EMULATED:-0}" != 1 ] || EMU=1
    [ "$EMU" = 0 ] || EMU_TAG=-EMULATED

    discover_gpus
    discover_nics
    preflight

    if [ "$DRY" = 1 ]; then
        OUT=${OUT:-./validate-site-$(hostname)-DATE}
        SUMMARY_TSV=$TMP/summary.tsv
    else
        OUT=${OUT:-$PWD/validate-site-$(hostname)-$(date +%Y%m%d-%H%M%S)}
        mkdir -p "$OUT/cells" || die "cannot create $OUT"
        OUT=$(cd "$OUT" && pwd)
        SUMMARY_TSV=$OUT/summary.tsv LOG=$OUT/run.log
        : >"$LOG"
    fi
    printf 'phase\tgpu\tnic\tlane\top\tsize\tverdict\tresult\tevidence\tfile\n' >"$SUMMARY_TSV"

    say "rc_gdr site validation$( [ "$DRY" = 1 ] && echo " -- DRY RUN (plan only)")$( [ "$EMU" = 1 ] && echo " -- EMULATED GPU")"
    if [ "$DRY" = 1 ]; then
        print_plan
    else
        (LOG="" print_plan) >"$OUT/plan.txt"
        tee -a "$LOG" <"$OUT/plan.txt"
    fi

    if phase_on env; then
        if [ "$DRY" = 1 ]; then
            say "== env: would record into $OUT/env"
        else
            phase_env
        fi
    fi
    run_phases
    if [ "$DRY" = 1 ]; then
        say "== cells: $(( $(wc -l <"$SUMMARY_TSV") - 1 )) (the first 4 of each phase; verdict, then command or reason)"
        awk -F'\t' 'NR > 1 && n[$1]++ < 4 {
                printf "  %-8s %-5s %-9s %-7s %-26s %-4s %-24s %s\n", $1, $2, $3, $4, $5, $6, $7, $9 }' "$SUMMARY_TSV"
    fi
    echo
    summarize
    [ "$N_FAIL" = 0 ] || exit 1
    exit 0
}

main "$@"
