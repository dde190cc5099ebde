#!/bin/bash
. contrib/env.sh build
export UCX_TLS=rc_gdr,ud_verbs:aux,self
WC=build/test/wire/wire_check
run() { # MODE KA
  local p=$((15000 + RANDOM % 1000))
  UCX_NET_DEVICES=rxe0:1 $WC -s -p $p -m 262144 > /tmp/s.log 2>&1 & s=$!
  UCX_NET_DEVICES=rxe1:1 env ${2:+UCX_KEEPALIVE_INTERVAL=$2} $WC -c 127.0.0.1 -p $p -m 262144 -o $1 -t 200 -w 150 > /tmp/c.log 2>&1 & c=$!
  sleep 6; kill -9 $s; k=$(date +%s.%N); wait $c
  l=$(grep RESULT /tmp/c.log); ea=$(sed -E 's/.* error_at=([0-9.]+).*/\1/' <<<"$l"); la=$(sed -E 's/.* last_ok=([0-9.]+).*/\1/' <<<"$l")
  echo "mode=$1 keepalive=${2:-20s(default)}: $(awk -v a=$ea -v b=$k -v c=$la 'BEGIN{printf "error %.1f s after SIGKILL, %.1f s after the last answer", a-b, a-c}') | $(grep -c 'retry counter exceeded' /tmp/c.log) retry-exceeded, $(grep -c 'TX_STALL' /tmp/c.log) stall | $l"
}
run idle 4s; run idle 4s
