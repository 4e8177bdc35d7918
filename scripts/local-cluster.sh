#!/usr/bin/env bash
# Starts or stops a three-node coordd cluster on loopback.
#
#   scripts/local-cluster.sh up DIR     start node1..node3 with data in DIR/nodeN
#   scripts/local-cluster.sh down DIR   stop them (by the PIDs in DIR/nodeN.pid)
#
# COORDD_BIN: the coordd binary to run (default: built from this tree into DIR/bin).
# BASE_PORT:  node N uses BASE_PORT+10*(N-1) for gRPC, +1 for metrics, +2 for Raft
#             (default 7410: gRPC on 7410, 7420, 7430).
# TLS=1:      mutual TLS everywhere: creates a development CA and certificates
#             in DIR/certs (coordctl certs dev: node1..node3 and a client
#             "admin"), and prints the COORD_TLS_* variables coordctl reads.
# ACL_FILE:   with TLS=1, an ACL file the nodes enforce (reloaded on SIGHUP).
# Writes DIR/nodeN.pid, DIR/nodeN.log and DIR/endpoints (comma-separated gRPC
# addresses), waits until a leader serves, and prints COORD_ENDPOINTS=...
set -euo pipefail

usage() { echo "usage: $0 up|down DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$2
base=${BASE_PORT:-7410}
here=$(cd "$(dirname "$0")/.." && pwd)

stop_all() {
  local pids=() pid
  for n in 1 2 3; do
    if [ -f "$dir/node$n.pid" ]; then
      pid=$(cat "$dir/node$n.pid")
      if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; pids+=("$pid"); fi
      rm -f "$dir/node$n.pid"
    fi
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

case "$cmd" in
up)
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  bin=${COORDD_BIN:-}
  if [ -z "$bin" ]; then
    bin="$dir/bin/coordd"
    (cd "$here" && go build -o "$bin" ./cmd/coordd)
  fi
  tls_args=()
  if [ "${TLS:-}" = 1 ]; then
    ctl="$dir/bin/coordctl"
    (cd "$here" && go build -o "$ctl" ./cmd/coordctl)
    if [ ! -f "$dir/certs/admin.pem" ]; then
      "$ctl" certs dev --dir "$dir/certs" --nodes node1,node2,node3 --clients admin >/dev/null
    fi
    export COORD_TLS_CERT="$dir/certs/admin.pem" COORD_TLS_KEY="$dir/certs/admin-key.pem" COORD_TLS_CA="$dir/certs/ca.pem"
  fi
  peers=""
  endpoints=""
  for n in 1 2 3; do
    p=$((base + 10 * (n - 1)))
    peers="${peers:+$peers,}node$n=127.0.0.1:$((p + 2))"
    endpoints="${endpoints:+$endpoints,}127.0.0.1:$p"
  done
  for n in 1 2 3; do
    p=$((base + 10 * (n - 1)))
    if [ "${TLS:-}" = 1 ]; then
      tls_args=(--tls-cert "$dir/certs/node$n.pem" --tls-key "$dir/certs/node$n-key.pem" --tls-ca "$dir/certs/ca.pem")
      if [ -n "${ACL_FILE:-}" ]; then tls_args+=(--acl-file "$ACL_FILE"); fi
    fi
    "$bin" --id "node$n" --data-dir "$dir/node$n" --grpc-addr "127.0.0.1:$p" \
      --http-addr "127.0.0.1:$((p + 1))" --raft-addr "127.0.0.1:$((p + 2))" --peers "$peers" \
      ${tls_args[@]+"${tls_args[@]}"} >"$dir/node$n.log" 2>&1 &
    echo $! >"$dir/node$n.pid"
  done
  echo "$endpoints" >"$dir/endpoints"
  # Wait until a node reports a leader on its health endpoint (with TLS:
  # until every member registered its gRPC address, so that any node
  # forwards to the leader).
  for _ in $(seq 1 200); do
    if [ "${TLS:-}" = 1 ]; then
      if [ "$("$ctl" --endpoints "$endpoints" --timeout 1s -o json members 2>/dev/null | grep -c '"grpc_address": "1')" = 3 ]; then
        echo "COORD_ENDPOINTS=$endpoints"
        echo "COORD_TLS_CERT=$COORD_TLS_CERT COORD_TLS_KEY=$COORD_TLS_KEY COORD_TLS_CA=$COORD_TLS_CA"
        exit 0
      fi
    fi
    for n in 1 2 3; do
      p=$((base + 10 * (n - 1) + 1))
      if [ "${TLS:-}" != 1 ] && (exec 3<>"/dev/tcp/127.0.0.1/$p" && printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3 && grep -q '^ok' <&3) 2>/dev/null; then
        echo "COORD_ENDPOINTS=$endpoints"
        exit 0
      fi
    done
    for n in 1 2 3; do
      if ! kill -0 "$(cat "$dir/node$n.pid")" 2>/dev/null; then
        echo "node$n exited; see $dir/node$n.log" >&2; stop_all; exit 1
      fi
    done
    sleep 0.1
  done
  echo "no leader after 20 s; logs in $dir" >&2
  stop_all
  exit 1
  ;;
down)
  stop_all
  ;;
*) usage ;;
esac
