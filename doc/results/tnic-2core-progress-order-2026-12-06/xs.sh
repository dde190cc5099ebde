#!/bin/bash
# /tmp/xs.sh TL N : one get1m pair with counters
cd /work/main
. contrib/env.sh build >/dev/null
export LD_LIBRARY_PATH=/work/main/build/test/tnic/lib:$LD_LIBRARY_PATH
export RC_GDR_TNIC_FABRIC=xs$$ XS=1
tl=$1; n=${2:-3000}; port=$((24000 + RANDOM % 1000))
if [ $tl = rc_verbs ]; then unset LD_PRELOAD; fi
taskset -c 0 ucx_perftest -p $port -x $tl -d tnic1:1 > /tmp/xs.srv.$tl 2>&1 &
sleep 0.5
taskset -c 1 ucx_perftest 127.0.0.1 -p $port -x $tl -d tnic1:1 -t get -D zcopy -s 1048576 -n $n -w 300 > /tmp/xs.cli.$tl 2>&1
wait
grep -E "^Final|XS" /tmp/xs.cli.$tl; grep XS /tmp/xs.srv.$tl
rm -f /dev/shm/rc_gdr_tnic.xs$$.*
