#!/bin/bash
#
# rxe-vm.sh: run a command inside a throw-away qemu (TCG) guest that has real
# RDMA verbs through soft-RoCE (rdma_rxe), for hosts whose kernel has no RDMA.
#
# The guest boots Debian's stock kernel (fetched with apt, never installed on
# the host), sees the host's root filesystem read-only over 9p with a tmpfs
# overlay on top (so it can write anywhere and nothing reaches the host), and
# has a veth pair v0<->v1 carrying rxe0 and rxe1. The command runs in the
# caller's cwd with the caller's exported environment; its stdout/stderr are
# streamed live and its exit status is returned.
#
# --hosts 2: two guests instead (two kernels, two qemu processes), each with
# one virtio-net NIC on a private Ethernet link between the two qemu
# processes (a qemu stream socket) and rxe0 on it; see usage below.
#
# Exit status: the command's own; 124 = timeout; 125 = VM failure (the console
# tail is printed); 2 = usage error.
#
# shellcheck disable=SC2317  # cleanup/on_signal run from traps
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: rxe-vm.sh [options] -- CMD [ARGS...]
  --timeout SEC   whole-run wall-clock limit (default 900); the command is
                  stopped a little earlier so that rc 124 and its partial
                  output still come back
  --mem MB        guest memory (2048)        --smp N    guest vCPUs (2)
  --cpu MODEL     qemu CPU model (qemu64; 'max' only for AVX2 binaries: slow)
  --mtu N         veth MTU (9000 -> RoCE MTU 4096; 1500 -> 1024)
  --nrxe 0|1|2    rxe devices to create: rxe0 on v0, rxe1 on v1 (2)
  --pcie-pairs N  a multi-socket PCIe tree instead of the veth pair (1..4):
                  N host bridges (pxb-pcie) on N NUMA nodes, each with a
                  root port holding a virtio-net NIC that carries rxe<i> and
                  a root port holding an emulated PCI function (qemu's edu)
                  standing for GPU<i>; /etc/rxevm-pcie-pairs in the guest
                  lists them, /etc/rxevm-gpus.env sets the stand-in CUDA
                  driver's devices to those functions, placed there (the
                  gate judges their place as a real GPU's)
  --nics-per-pair 1|2  with --pcie-pairs: 2 puts a second NIC (rxe<i>b, on
                  a third root port) beside each GPU, for UCP's rails;
                  /etc/rxevm-pcie-rails lists them
  --iommu         with --pcie-pairs: an emulated Intel IOMMU (intel_iommu=on
                  in the guest, DMA translation): every function in an IOMMU
                  group
  --rw DIR        share DIR writable at the same path (repeatable); all other
                  guest writes stay in the guest
  --fresh-tmp     mount an empty tmpfs on /tmp (default: host /tmp visible,
                  writes go to the guest's tmpfs overlay)
  --kernel PKG|FILE.deb   guest kernel package (default: what the
                  linux-image-amd64 metapackage depends on)
  --keep          keep the run dir (console.log, dmesg.log, out, err)
  --prepare       only build the cached kernel + initramfs, then exit
  -v              verbose (timings; guest console to stderr)
  --hosts 1|2     2: two guests, rxevm1 (10.77.0.1) and rxevm2 (10.77.0.2),
                  each with rxe0 on its eth0; the two eth0 are one virtual
                  Ethernet link between the two qemu processes. CMD runs on
                  rxevm1; rxevm2 runs an agent that starts what CMD asks for
                  there (defaults then: --mem 1024 --smp 1 each)
  --netem SPEC    with --hosts 2: 'tc qdisc add dev eth0 root netem SPEC' on
                  both guests' side of the link at boot
  -h, --help      this text
Environment: RXEVM_CACHE (default $RC_GDR_CACHE/rxe-vm, RC_GDR_CACHE
defaulting to /var/cache/rc_gdr).
Inside: ibv_rc_pingpong needs '-g 0'; UCP needs UCX_TLS=rc,self (the UD aux
transport), e.g. UCX_NET_DEVICES=rxe0:1 / rxe1:1 per process.
Inside rxevm1 with --hosts 2 (commands on PATH; the control channel is a 9p
share of the run dir, never the link under test):
  rxevm-remote CMD [ARGS...]   run CMD on rxevm2 (the agent there starts it),
                  same cwd and exported environment; streams its output,
                  returns its status; SIGTERM/SIGINT stop it there
  rxevm-netem SPEC|off         replace/remove the netem qdisc on both eth0
  rxevm-link down|up           carrier off/on at both NICs (qemu set_link,
                  done by the host): a cable pulled between the two hosts
  rxevm-kill-host 2            SIGKILL rxevm2's qemu (a host gone)
  rxevm-rsh HOST CMD...        ssh stand-in for launchers (mpirun's
                  --mca plm_rsh_agent rxevm-rsh)
  UCP between the hosts wants UCX_IB_GID_INDEX=0 (the link-local GID): with
  UCX's own pick, the IPv4-mapped GID, ud_verbs gets no packet through.
EOF
}

TIMEOUT=900 MEM=2048 SMP=2 CPU=qemu64 MTU=9000 NRXE=2 KEEP=0 PREPARE=0
PCIE_PAIRS=0
NICS_PER_PAIR=1
IOMMU=0
VERBOSE=0 FRESH_TMP=0 KERNEL=auto HOSTS=1 NETEM=
MEM_SET=0 SMP_SET=0
RW_DIRS=()
CACHE=${RXEVM_CACHE:-${RC_GDR_CACHE:-/var/cache/rc_gdr}/rxe-vm}
MODULES="virtio_pci 9pnet_virtio 9p overlay veth crc32_generic rdma_rxe ib_uverbs rdma_ucm"
PKGS="qemu-system-x86 busybox-static kmod cpio xz-utils zstd iproute2 rdma-core
      ibverbs-providers ibverbs-utils"
T0=$EPOCHREALTIME

die() { echo "rxe-vm: $*" >&2; exit 125; }
bad_usage() { echo "rxe-vm: $*" >&2; usage >&2; exit 2; }
vlog() {
    [ "$VERBOSE" = 1 ] || return 0
    awk -v a="$T0" -v b="$EPOCHREALTIME" -v m="$*" \
        'BEGIN { printf "rxe-vm: [%5.1fs] %s\n", b - a, m }' >&2
}
# Run quietly unless -v; on failure show what the command said.
quiet() {
    local log rc=0
    if [ "$VERBOSE" = 1 ]; then "$@" >&2; return; fi
    log=$(mktemp); "$@" >"$log" 2>&1 || rc=$?
    [ "$rc" = 0 ] || { tail -n 20 "$log" >&2; rm -f "$log"; return "$rc"; }
    rm -f "$log"
}

parse_args() {
    local n
    while [ $# -gt 0 ]; do
        case $1 in
        --timeout|--mem|--smp|--mtu|--nrxe|--pcie-pairs|--nics-per-pair)
            [ $# -ge 2 ] && [[ $2 =~ ^[0-9]+$ ]] || bad_usage "$1 needs a number"
            n=${1#--}; n=${n//-/_}; printf -v "${n^^}" '%s' "$2"
            case $n in mem) MEM_SET=1 ;; smp) SMP_SET=1 ;; esac; shift ;;
        --hosts)  [ $# -ge 2 ] && [[ $2 =~ ^[12]$ ]] || bad_usage "--hosts needs 1 or 2"
                  HOSTS=$2; shift ;;
        --netem)  [ $# -ge 2 ] || bad_usage "--netem needs a value"; NETEM=$2; shift ;;
        --cpu)    [ $# -ge 2 ] || bad_usage "--cpu needs a value"; CPU=$2; shift ;;
        --kernel) [ $# -ge 2 ] || bad_usage "--kernel needs a value"; KERNEL=$2; shift ;;
        --rw)     [ $# -ge 2 ] && [ -d "$2" ] || bad_usage "--rw needs a directory"
                  RW_DIRS+=("$(realpath "$2")"); shift ;;
        --fresh-tmp) FRESH_TMP=1 ;;
        --iommu)   IOMMU=1 ;;
        --keep)    KEEP=1 ;;
        --prepare) PREPARE=1 ;;
        -v)        VERBOSE=1 ;;
        -h|--help) usage; exit 0 ;;
        --)        shift; break ;;
        *)         bad_usage "unknown option '$1'" ;;
        esac
        shift
    done
    [ "$NRXE" -le 2 ] || bad_usage "--nrxe must be 0, 1 or 2"
    [ "$PCIE_PAIRS" -le 4 ] || bad_usage "--pcie-pairs must be 0 to 4"
    [ "$IOMMU" = 0 ] || [ "$PCIE_PAIRS" -gt 0 ] ||
        bad_usage "--iommu needs --pcie-pairs"
    [ "$NICS_PER_PAIR" -ge 1 ] && [ "$NICS_PER_PAIR" -le 2 ] ||
        bad_usage "--nics-per-pair must be 1 or 2"
    [ "$TIMEOUT" -ge 10 ] || bad_usage "--timeout must be at least 10"
    [ "$PREPARE" = 1 ] || [ $# -gt 0 ] || bad_usage "no command given"
    [ -z "$NETEM" ] || [ "$HOSTS" = 2 ] || bad_usage "--netem needs --hosts 2"
    if [ "$HOSTS" = 2 ]; then
        [ "$MEM_SET" = 1 ] || MEM=1024
        [ "$SMP_SET" = 1 ] || SMP=1
        MODULES="$MODULES virtio_net sch_netem"
    fi
    CMD=("$@")
}

# Install the host tools the harness needs; apt-get update only when needed.
ensure_packages() {
    local p have missing=()
    # shellcheck disable=SC2086
    have=" $(dpkg-query -W -f='${Package} ${Status}\n' $PKGS 2>/dev/null |
             awk '/ ok installed$/ {printf "%s ", $1}' || true)"
    for p in $PKGS; do [[ $have == *" $p "* ]] || missing+=("$p"); done
    [ ${#missing[@]} = 0 ] && return 0
    echo "rxe-vm: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive quiet apt-get update -q
    DEBIAN_FRONTEND=noninteractive quiet apt-get install -y -q \
        --no-install-recommends "${missing[@]}"
}

# The kernel package name. apt-cache costs ~0.7 s, so the answer is kept
# until the apt package cache changes.
resolve_kernel_pkg() {
    local stamp memo=$CACHE/kernel.auto pkg
    [ "$KERNEL" = auto ] || { echo "$KERNEL"; return; }
    stamp=$(stat -c %Y /var/cache/apt/pkgcache.bin /var/lib/apt/lists 2>/dev/null | tr '\n' . || true)
    if [ -f "$memo" ] && [ "$(sed -n 1p "$memo")" = "$stamp" ]; then
        sed -n 2p "$memo"; return
    fi
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
          awk '$1 == "Depends:" && $2 ~ /^linux-image-/ && !n++ {print $2}')
    if [ -z "$pkg" ]; then
        quiet apt-get update -q
        pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
              awk '$1 == "Depends:" && $2 ~ /^linux-image-/ && !n++ {print $2}')
    fi
    [ -n "$pkg" ] || die "cannot resolve linux-image-amd64 in the apt sources"
    printf '%s\n%s\n' "$stamp" "$pkg" >"$memo"
    echo "$pkg"
}

# bzImage -> vmlinux ELF: the guest would otherwise spend ~7 s of every TCG
# boot decompressing itself; an ELF with a PVH note boots directly.
extract_vmlinux() {
    local bz=$1 out=$2 setup off len start magic dec
    setup=$(od -An -tu1 -j $((0x1f1)) -N1 "$bz"); [ "$setup" -eq 0 ] && setup=4
    off=$(od -An -tu4 -j $((0x248)) -N4 "$bz")   # payload_offset
    len=$(od -An -tu4 -j $((0x24c)) -N4 "$bz")   # payload_length
    start=$(( (setup + 1) * 512 + off ))
    magic=$(od -An -tx1 -j "$start" -N4 "$bz" | tr -d ' \n')
    # xz and zstd payloads carry a 4-byte size trailer that the tools reject.
    case $magic in
    fd377a58) len=$((len - 4)); dec=(xz -dc) ;;
    28b52ffd) len=$((len - 4)); dec=(zstd -dcq) ;;
    1f8b*)    dec=(gzip -dc) ;;
    *) die "unknown kernel payload compression (magic $magic)" ;;
    esac
    dd if="$bz" bs=1M iflag=skip_bytes,count_bytes skip="$start" count="$len" \
        status=none | "${dec[@]}" >"$out.tmp"
    [ "$(head -c4 "$out.tmp" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ] ||
        die "decompressed kernel is not an ELF"
    mv "$out.tmp" "$out"
}

# Fetch + unpack the kernel package once per version: sets KDIR, KROOT, KVER.
prepare_kernel() {
    local pkg deb name
    pkg=$(resolve_kernel_pkg)
    if [ -f "$pkg" ]; then deb=$(realpath "$pkg"); name=$(basename "$deb" .deb)
    else name=$pkg; fi
    KDIR=$CACHE/$name KROOT=$CACHE/$name/root
    if [ ! -f "$KDIR/vmlinux" ]; then
        vlog "preparing kernel $name"
        if [ -z "${deb:-}" ]; then
            mkdir -p "$CACHE/debs"
            deb=$(ls "$CACHE/debs/${pkg}_"*.deb 2>/dev/null | tail -n1 || true)
            if [ -z "$deb" ]; then
                # -o Sandbox: the cache dir is not readable by _apt.
                (cd "$CACHE/debs" && quiet apt-get download -o APT::Sandbox::User=root "$pkg") ||
                    die "apt-get download $pkg failed"
                deb=$(ls "$CACHE/debs/${pkg}_"*.deb | tail -n1)
            fi
        fi
        rm -rf "$KDIR"; mkdir -p "$KROOT"
        dpkg-deb -x "$deb" "$KROOT"
        # Kernels that ship modules under /usr/lib/modules (trixie).
        [ -e "$KROOT/lib" ] || ln -s usr/lib "$KROOT/lib"
        KVER=$(ls "$KROOT/lib/modules" | head -n1)
        [ -n "$KVER" ] && [ -f "$KROOT/boot/vmlinuz-$KVER" ] || die "no kernel in $deb"
        depmod -b "$KROOT" "$KVER"
        extract_vmlinux "$KROOT/boot/vmlinuz-$KVER" "$KDIR/vmlinux"
        vlog "kernel $KVER ready"
    fi
    KVER=$(ls "$KROOT/lib/modules" | head -n1)
}

# The guest's PID 1 (busybox sh). Settings come from the kernel command line
# (rxevm.run=) and from $RUN/conf, so the text, and the cached initramfs, stay
# the same from run to run.
init_script() {
    cat <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
exec </dev/null
fail() { echo "rxevm-init: FAILED: $*"; dmesg | tail -n 20; poweroff -f; sleep 5; }
for m in $(cat /modules.list); do insmod "/mods/$m" || fail "insmod $m"; done
RUN=; HOST=0
for a in $(cat /proc/cmdline); do
    case $a in rxevm.run=*) RUN=${a#*=};; rxevm.host=*) HOST=${a#*=};; esac
done
O9="trans=virtio,version=9p2000.L,msize=512000"
mkdir -p /lower /ovl /newroot /xrun
mount -t 9p -o "$O9,ro,cache=loose" rxevm_root /lower || fail "9p root"
mount -t 9p -o "$O9" rxevm_run /xrun || fail "9p run dir"
. /xrun/conf
# / = host / (read-only) + tmpfs upper: writable everywhere, host untouched.
mount -t tmpfs -o mode=755 ovl /ovl; mkdir /ovl/u /ovl/w
mount -t overlay -o lowerdir=/lower,upperdir=/ovl/u,workdir=/ovl/w root /newroot ||
    fail "overlay"
R=/newroot
mount -t proc proc $R/proc; mount -t sysfs sys $R/sys; mount -t devtmpfs dev $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 shm $R/dev/shm
[ "$FRESH_TMP" = 1 ] && mount -t tmpfs -o mode=1777 tmp $R/tmp
mkdir -p "$R$RUN" && mount -o bind /xrun "$R$RUN" || fail "bind run dir"
i=0; while [ $i -lt "$RW_N" ]; do
    eval "d=\$RW_$i"; mkdir -p "$R$d"
    mount -t 9p -o "$O9" "rxevm_rw$i" "$R$d" || fail "9p $d"; i=$((i + 1))
done
if [ "$HOST" = 0 ]; then
    hostname rxevm; echo "127.0.1.1 rxevm" >>$R/etc/hosts
else
    hostname rxevm$HOST
    printf '10.77.0.1 rxevm1\n10.77.0.2 rxevm2\n' >>$R/etc/hosts
fi
# So that modprobe works inside (e.g. modprobe vgem).
[ -e "$R/lib/modules/$KVER" ] || { mkdir -p $R/lib/modules &&
    ln -s "$KROOT/lib/modules/$KVER" "$R/lib/modules/$KVER"; }
# No DAD: link-local addresses (= the RoCE GIDs) are usable at once.
for c in all default; do echo 0 >/proc/sys/net/ipv6/conf/$c/accept_dad; done
echo 100000 >/proc/sys/net/core/netdev_max_backlog
if [ "$HOST" = 0 ] && [ "$PCIE_PAIRS" = 0 ]; then
# Absolute paths: busybox's own ip applet would shadow the host's (no veth).
printf '%s\n' "link set lo up" "link add v0 mtu $MTU type veth peer name v1 mtu $MTU" \
    "link set v0 up" "link set v1 up" | chroot $R /usr/sbin/ip -b - || fail "veth"
# veth queues packets on the sending CPU; with 2 vCPUs RoCE packets then get
# reordered (NAK + retransmit stalls). Steer all to CPU0.
for v in v0 v1; do echo 1 >/sys/class/net/$v/queues/rx-0/rps_cpus; done
i=0; while [ $i -lt "$NRXE" ]; do echo "link add rxe$i type rxe netdev v$i"; i=$((i + 1)); done |
    { [ "$NRXE" = 0 ] || chroot $R /usr/bin/rdma -b -; } || fail "rdma link add"
elif [ "$HOST" = 0 ]; then
# --pcie-pairs: pair i is host bridge pci0000:<PXB_i> holding a virtio-net
# NIC (rxe<i> on it) and an edu function (GPU<i>), found by their places.
chroot $R /sbin/modprobe virtio_net || fail "modprobe virtio_net"
chroot $R /usr/sbin/ip link set lo up
: >$R/etc/rxevm-pcie-pairs; gpus=; i=0
# With --nics-per-pair 2 the pair's second NIC carries rxe<i>b, listed in
# /etc/rxevm-pcie-rails.
: >$R/etc/rxevm-pcie-rails
for hb in $PXB_BUSES; do
    nics=; gpu=
    for d in /sys/devices/pci0000:$hb/*/*; do
        [ -f "$d/vendor" ] || continue
        case "$(cat $d/vendor):$(cat $d/device)" in
        0x1af4:0x1041|0x1af4:0x1000) nics="$nics ${d##*/}" ;;
        0x1234:0x11e8) gpu=${d##*/} ;;
        esac
    done
    [ -n "$nics" ] && [ -n "$gpu" ] || fail "pair $i below pci0000:$hb"
    sfx=
    for nic in $nics; do
        ndev=$(ls /sys/bus/pci/devices/$nic/virtio*/net 2>/dev/null | head -n1)
        [ -n "$ndev" ] || fail "pair $i: no netdev on $nic"
        chroot $R /usr/sbin/ip link set "$ndev" mtu "$MTU" up || fail "link $ndev"
        echo 1 >/sys/class/net/$ndev/queues/rx-0/rps_cpus
        chroot $R /usr/bin/rdma link add rxe$i$sfx type rxe netdev "$ndev" || fail "rxe$i$sfx"
        if [ -z "$sfx" ]; then
            echo "pair $i: host bridge pci0000:$hb numa_node $(cat /sys/bus/pci/devices/$gpu/numa_node) nic $nic netdev $ndev rxe$i gpu $gpu" >>$R/etc/rxevm-pcie-pairs
        else
            echo "pair $i: also nic $nic netdev $ndev rxe$i$sfx" >>$R/etc/rxevm-pcie-rails
        fi
        sfx=b
    done
    gpus=${gpus:+$gpus,}$gpu; i=$((i + 1))
done
echo "export RC_GDR_FAKE_CUDA_DEVICES=$i RC_GDR_FAKE_CUDA_PCI_BUS_ID=$gpus RC_GDR_FAKE_CUDA_PLACED=1" >$R/etc/rxevm-gpus.env
NRXE=$i
else
# Two hosts: eth0 is the NIC on the link between the two qemu processes.
NRXE=1
echo 0 >/proc/sys/net/ipv6/conf/eth0/accept_dad
printf '%s\n' "link set lo up" "link set eth0 mtu $MTU" "link set eth0 up" \
    "addr add 10.77.0.$HOST/24 dev eth0" | chroot $R /usr/sbin/ip -b - || fail "eth0"
echo 1 >/sys/class/net/eth0/queues/rx-0/rps_cpus
echo "link add rxe0 type rxe netdev eth0" | chroot $R /usr/bin/rdma -b - || fail "rdma link add"
if [ -n "$NETEM" ]; then
    chroot $R /usr/sbin/tc qdisc add dev eth0 root netem $NETEM || fail "netem $NETEM"
fi
fi
# Wait for ACTIVE ports with GID[0] (rxe only has RoCE v2 GIDs, index 1 stays empty).
i=0; n=0; while [ $i -lt "$NRXE" ]; do
    p=/sys/class/infiniband/rxe$i/ports/1
    case "$(cat $p/state 2>/dev/null)/$(cat $p/gids/0 2>/dev/null)" in
    *ACTIVE/fe80*) i=$((i + 1)); continue ;;
    esac
    n=$((n + 1)); [ $n -lt 400 ] || fail "rxe$i not ACTIVE"; sleep 0.05
done
if [ "$HOST" = 1 ]; then
    # The command starts once the other host is up too.
    n=0; while [ ! -e /xrun/ready2 ]; do
        n=$((n + 1)); [ $n -lt 1200 ] || fail "rxevm2 did not come up"; sleep 0.1
    done
fi
T=$((DEADLINE - $(date +%s))); [ $T -ge 1 ] || T=1
echo "rxevm-init: ready, command gets ${T}s"
if [ "$HOST" = 2 ]; then
    # The second host runs the agent until its qemu is stopped.
    : >/xrun/ready2
    chroot $R /bin/bash "$RUN/bin/rxevm-agent" >"$R$RUN/agent.log" 2>&1
    dmesg >/xrun/dmesg2.log
    poweroff -f
fi
chroot $R /usr/bin/timeout -k 3 $T /bin/bash "$RUN/job.sh" >"$R$RUN/out" 2>"$R$RUN/err"
rc=$?
# timeout says 137 when the command ignored TERM and needed KILL: still a timeout.
[ $rc = 137 ] && [ "$(date +%s)" -ge "$DEADLINE" ] && rc=124
echo $rc >/xrun/rc
dmesg >/xrun/dmesg.log
poweroff -f
EOF
}

# initramfs = static busybox + /init + the modules (with dependencies, in load
# order). Kept uncompressed: unpacking a compressed one costs TCG boot time.
prepare_initramfs() {
    local m mods key work f
    mods=$(for m in $MODULES; do
               modprobe -d "$KROOT" -S "$KVER" --show-depends "$m" ||
                   die "module $m not found for $KVER"
           done | awk '$1 == "insmod" && !seen[$2]++ {print $2}')
    key=$( { init_script; echo "$mods"; stat -c %s.%Y /bin/busybox; } | sha256sum | cut -c1-16)
    INITRD=$KDIR/initrd-$key.cpio
    [ -f "$INITRD" ] && return 0
    vlog "building initramfs $key"
    work=$(mktemp -d)
    mkdir -p "$work"/{bin,mods,proc,sys,dev}
    cp /bin/busybox "$work/bin/busybox"
    init_script >"$work/init"; chmod 755 "$work/init"
    for f in $mods; do
        case $f in
        *.ko.xz)  xz -dc "$f"  >"$work/mods/$(basename "$f" .xz)" ;;
        *.ko.zst) zstd -dcq "$f" >"$work/mods/$(basename "$f" .zst)" ;;
        *.ko.gz)  gzip -dc "$f" >"$work/mods/$(basename "$f" .gz)" ;;
        *)        cp "$f" "$work/mods/" ;;
        esac
        basename "$f" | sed -E 's/\.(xz|zst|gz)$//' >>"$work/modules.list"
    done
    (cd "$work" && find . | cpio -o -H newc --quiet) >"$INITRD.tmp"
    mv "$INITRD.tmp" "$INITRD"; rm -rf "$work"
}

# Cache preparation is serialized so that concurrent runs share the result.
prepare() {
    mkdir -p "$CACHE"
    exec 9>"$CACHE/.lock"; flock 9
    prepare_kernel
    prepare_initramfs
    flock -u 9; exec 9>&-
}

# A qemu option value: commas are escaped by doubling.
qv() { printf '%s' "${1//,/,,}"; }

# job.sh: the caller's exported environment, cwd and argv, all %q-quoted.
write_job() {
    local n
    {
        echo "# generated by rxe-vm.sh"
        for n in $(compgen -e); do
            case $n in PWD|OLDPWD|SHLVL|_|SHELLOPTS|BASHOPTS) continue ;; esac
            [[ -v $n ]] && printf 'export %s=%q\n' "$n" "${!n}"
        done
        # root has CAP_IPC_LOCK anyway, but some tools check the limit.
        echo "ulimit -l unlimited 2>/dev/null"
        if [ "$HOSTS" = 2 ]; then
            printf 'export RXEVM_RUN=%q PATH=%q/bin:"$PATH"\n' "$RUN" "$RUN"
        fi
        printf 'cd -- %q || exit 125\n' "$PWD"
        printf 'exec'; printf ' %q' "${CMD[@]}"; echo
    } >"$RUN/job.sh"
}

# Kill what we started (qemu via its pidfile, the timeout wrapper, the tails)
# and remove the run dir unless --keep.
PIDS=()
cleanup() {
    local p
    for p in qemu qemu2; do
        if [ -n "${RUN:-}" ] && [ -s "$RUN/$p.pid" ]; then
            kill "$(cat "$RUN/$p.pid")" 2>/dev/null || true
        fi
    done
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    if [ -n "${RUN:-}" ] && [ -d "$RUN" ]; then
        if [ "$KEEP" = 1 ]; then echo "rxe-vm: run dir kept: $RUN" >&2
        else rm -rf "$RUN"; fi
    fi
}
on_signal() { trap - INT TERM; echo "rxe-vm: interrupted" >&2; exit "$1"; }

console_tail() {
    echo "rxe-vm: --- guest console (tail) ---" >&2
    tail -n 40 "$RUN/console.log" >&2 2>/dev/null || true
    echo "rxe-vm: ---" >&2
}

# --pcie-pairs: the host bridges' bus numbers (hex), one per pair
pcie_pairs_buses() {
    local i
    for ((i = 0; i < PCIE_PAIRS; ++i)); do printf '%02x ' $((0x20 * (i + 1))); done
}

# q35 with one NUMA node per pair, each pair a pxb-pcie host bridge on its
# node with two root ports: a virtio-net NIC and an edu function (the "GPU");
# all NICs on one hub, a wire as the veth pair was.
pcie_pairs_args() {
    local i bus mem=$((MEM / PCIE_PAIRS))
    QEMU[4]=q35,accel=tcg
    [ "$IOMMU" = 0 ] || QEMU+=(-device intel-iommu)
    for ((i = 0; i < PCIE_PAIRS; ++i)); do
        bus=$((0x20 * (i + 1)))
        QEMU+=(-object "memory-backend-ram,id=mem$i,size=${mem}M"
               -numa "node,nodeid=$i,memdev=mem$i"
               -device "pxb-pcie,id=pxb$i,bus_nr=$bus,numa_node=$i,bus=pcie.0"
               -device "pcie-root-port,id=rpn$i,bus=pxb$i,chassis=$((2 * i + 1)),slot=0,addr=0x0"
               -device "pcie-root-port,id=rpg$i,bus=pxb$i,chassis=$((2 * i + 2)),slot=0,addr=0x1"
               -netdev "hubport,id=hp$i,hubid=0"
               -device "virtio-net-pci,netdev=hp$i,bus=rpn$i,mac=52:54:00:00:00:$((10 + i))"
               -device "edu,bus=rpg$i")
        [ "$NICS_PER_PAIR" = 1 ] ||
            QEMU+=(-device "pcie-root-port,id=rpm$i,bus=pxb$i,chassis=$((2 * i + 11)),slot=0,addr=0x2"
                   -netdev "hubport,id=hq$i,hubid=0"
                   -device "virtio-net-pci,netdev=hq$i,bus=rpm$i,mac=52:54:00:00:00:$((20 + i))")
    done
}

# qemu_cmdline HOST APPEND: the qemu command line of one guest (HOST 0: the
# one-guest mode; 1 and 2: the two hosts, joined by a stream socket link that
# host 1 serves). Sets the array QEMU.
qemu_cmdline() {
    local host=$1 append=$2 sfx="" i
    [ "$host" -le 1 ] || sfx=$host
    # shellcheck disable=SC2054  # commas are qemu's, not array separators
    QEMU=(qemu-system-x86_64 -nodefaults -no-user-config -machine pc,accel=tcg
        -cpu "$CPU" -smp "$SMP" -m "$MEM" -display none -nic none -no-reboot
        -kernel "$KDIR/vmlinux" -initrd "$INITRD" -append "$append"
        -serial "file:$RUN/console$sfx.log" -pidfile "$RUN/qemu$sfx.pid"
        -fsdev local,id=fsroot,path=/,security_model=none,readonly=on,multidevs=remap
        -device virtio-9p-pci,fsdev=fsroot,mount_tag=rxevm_root
        -fsdev "local,id=fsrun,path=$RUN,security_model=none"
        -device virtio-9p-pci,fsdev=fsrun,mount_tag=rxevm_run)
    [ "$host" != 0 ] || [ "$PCIE_PAIRS" = 0 ] || pcie_pairs_args
    for i in "${!RW_DIRS[@]}"; do
        QEMU+=(-fsdev "local,id=fsrw$i,path=$(qv "${RW_DIRS[$i]}"),security_model=none"
               -device "virtio-9p-pci,fsdev=fsrw$i,mount_tag=rxevm_rw$i")
    done
    [ "$host" -ge 1 ] || return 0
    # The link: host 1 listens on a unix socket, host 2 connects. The
    # monitor lets the host pull the cable (set_link).
    QEMU+=(-netdev "stream,id=net0,server=$([ "$host" = 1 ] && echo on || echo off),addr.type=unix,addr.path=$RUN/link.sock"
           -device "virtio-net-pci,netdev=net0,mac=52:54:00:77:00:0$host"
           -monitor "tcp:127.0.0.1:$(cat "$RUN/mon$host.port"),server=on,wait=off")
}

# An HMP command to the monitor of host N (a TCP socket on the loopback:
# bash reaches it without starting a program, so a cable is pulled at both
# NICs within milliseconds).
monitor_cmd() {
    local fd
    exec {fd}<>"/dev/tcp/127.0.0.1/$(cat "$RUN/mon$1.port")" || return 1
    printf '%s\n' "$2" >&"$fd"
    sleep 0.05
    exec {fd}>&-
}

# The host's side of the guests' control requests ($RUN/ctl/*.req, written by
# rxevm-link and rxevm-kill-host in a guest): pull or plug the cable at both
# NICs, or kill host 2's qemu. Each request is answered by a .done file.
control_loop() {
    local r what
    while :; do
        for r in "$RUN"/ctl/*.req; do
            [ -e "$r" ] || continue
            what=$(cat "$r")
            case $what in
            "link down") monitor_cmd 1 "set_link net0 off"; monitor_cmd 2 "set_link net0 off" ;;
            "link up")   monitor_cmd 1 "set_link net0 on";  monitor_cmd 2 "set_link net0 on" ;;
            # a cut of exactly SECS on the host's clock (a guest's own sleep
            # between two requests stretches on a loaded host)
            "link blip "*)
                         monitor_cmd 1 "set_link net0 off"; monitor_cmd 2 "set_link net0 off"
                         date +%s.%N >>"$r"; sleep "${what#link blip }"
                         monitor_cmd 1 "set_link net0 on";  monitor_cmd 2 "set_link net0 on" ;;
            "kill 2")    [ -s "$RUN/qemu2.pid" ] && kill -KILL "$(cat "$RUN/qemu2.pid")"
                         : >"$RUN/q/host2.gone" ;;  # rxevm-remote stops waiting
            esac >"$r.log" 2>&1
            # the host's clock when it was done: how long a cut lasted
            date +%s.%N >>"$r"
            mv "$r" "${r%.req}.done"
        done
        sleep 0.1
    done
}

run_vm() {
    local margin qrc=0 rc i append qpid
    RUN=$(mktemp -d /tmp/rxevm-run.XXXXXX)
    chmod 755 "$RUN"
    write_job
    : >"$RUN/out"; : >"$RUN/err"; : >"$RUN/console.log"
    # The command must stop early enough for rc + output to come back.
    margin=$((TIMEOUT / 8)); [ $margin -le 30 ] || margin=30; [ $margin -ge 8 ] || margin=8
    {
        echo "MTU=$MTU NRXE=$NRXE FRESH_TMP=$FRESH_TMP RW_N=${#RW_DIRS[@]}"
        echo "PCIE_PAIRS=$PCIE_PAIRS PXB_BUSES='$(pcie_pairs_buses)'"
        printf 'NETEM=%q\n' "$NETEM"
        echo "KVER=$KVER DEADLINE=$(( $(date +%s) + TIMEOUT - margin ))"
        printf 'KROOT=%q\n' "$KROOT"
        for i in "${!RW_DIRS[@]}"; do printf 'RW_%d=%q\n' "$i" "${RW_DIRS[$i]}"; done
    } >"$RUN/conf"
    # no_timer_check: on a loaded host, TCG's timer can look broken to the
    # kernel's IO-APIC check, which then panics at boot.
    append="console=ttyS0 panic=-1 rdinit=/init mitigations=off no_timer_check rxevm.run=$RUN"
    [ "$VERBOSE" = 1 ] || append="quiet $append"
    [ "$IOMMU" = 0 ] || append="$append intel_iommu=on iommu.passthrough=0"
    vlog "booting (timeout ${TIMEOUT}s, command gets at most $((TIMEOUT - margin))s)"
    if [ "$HOSTS" = 2 ]; then
        mkdir -p "$RUN/bin" "$RUN/q" "$RUN/ctl"
        # monitor ports: random, retried once by the boot retry if taken
        echo $((20000 + RANDOM % 20000)) >"$RUN/mon1.port"
        echo $((20000 + RANDOM % 20000)) >"$RUN/mon2.port"
        cp "$(dirname "$(realpath "$0")")"/lib/rxevm/rxevm-* "$RUN/bin/"
        : >"$RUN/console2.log"
        qemu_cmdline 1 "$append rxevm.host=1"
        timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null >"$RUN/qemu.log" 2>&1 &
        qpid=$!; PIDS+=("$qpid")
        # host 2 connects to host 1's end of the link
        for i in $(seq 100); do [ -S "$RUN/link.sock" ] && break; sleep 0.05; done
        qemu_cmdline 2 "$append rxevm.host=2"
        timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null >"$RUN/qemu2.log" 2>&1 &
        PIDS+=($!)
        control_loop & PIDS+=($!)
    else
        qemu_cmdline 0 "$append"
        timeout -k 5 "$TIMEOUT" "${QEMU[@]}" </dev/null >"$RUN/qemu.log" 2>&1 &
        qpid=$!; PIDS+=("$qpid")
    fi
    # Stream the command's output live; tail exits once qemu has gone.
    tail -n +1 -s 0.2 --pid="$qpid" -f "$RUN/out" & PIDS+=($!)
    tail -n +1 -s 0.2 --pid="$qpid" -f "$RUN/err" >&2 & PIDS+=($!)
    [ "$VERBOSE" = 0 ] || { tail -n +1 -s 0.2 --pid="$qpid" -f "$RUN/console.log" >&2 & PIDS+=($!); }
    wait "$qpid" || qrc=$?
    rm -f "$RUN/qemu.pid"   # never kill a recycled pid in cleanup
    if [ "$HOSTS" = 2 ]; then
        # host 1 is done: host 2 and the control loop go with it
        [ -s "$RUN/qemu2.pid" ] && kill "$(cat "$RUN/qemu2.pid")" 2>/dev/null
        rm -f "$RUN/qemu2.pid"
        for i in "${PIDS[@]:1}"; do kill "$i" 2>/dev/null || true; done
    fi
    for i in "${PIDS[@]:1}"; do wait "$i" 2>/dev/null || true; done
    PIDS=()
    vlog "qemu exited ($qrc)"
    rc=$(cat "$RUN/rc" 2>/dev/null || true)
    if [[ $rc =~ ^[0-9]+$ ]]; then return "$rc"; fi
    if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
        echo "rxe-vm: VM timed out after ${TIMEOUT}s" >&2; console_tail; return 124
    fi
    echo "rxe-vm: VM failed (qemu rc $qrc, no command status)" >&2
    cat "$RUN/qemu.log" >&2 2>/dev/null || true
    console_tail
    # The command never started: the guest did not boot (worth one retry).
    grep -q 'rxevm-init: ready' "$RUN/console.log" 2>/dev/null || return 126
    return 125
}

main() {
    parse_args "$@"
    ensure_packages
    prepare
    vlog "kernel $KVER, initramfs $(basename "$INITRD")"
    if [ "$PREPARE" = 1 ]; then echo "$KDIR/vmlinux"; echo "$INITRD"; exit 0; fi
    trap cleanup EXIT
    trap 'on_signal 130' INT
    trap 'on_signal 143' TERM
    local rc=0
    run_vm || rc=$?
    if [ "$rc" = 126 ]; then
        echo "rxe-vm: the guest did not boot; booting it once more" >&2
        [ "$KEEP" = 1 ] || rm -rf "$RUN"
        rc=0
        run_vm || rc=$?
    fi
    [ "$rc" != 126 ] || rc=125
    exit "$rc"
}

main "$@"
