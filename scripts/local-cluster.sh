#!/usr/bin/env bash
# Runs a three-node coordd cluster on loopback; each node is a process whose
# PID is in DIR/nodeN.pid, its data in DIR/nodeN, its log in DIR/nodeN.log.
#
#   scripts/local-cluster.sh up DIR          start every node that is not running, wait until they serve
#   scripts/local-cluster.sh status DIR      each node: running or not, PID, address, health (exit 3 if one is not running)
#   scripts/local-cluster.sh stop DIR N      stop node N (1, 2 or 3) by its PID
#   scripts/local-cluster.sh restart DIR N   stop node N if it runs, start it, wait until it serves
#   scripts/local-cluster.sh down DIR        stop every node by its PID
#
# up leaves running nodes alone (and says so): it never writes over a running
# node's PID file, and logs are appended to, never emptied. It fails, naming
# the node and printing the end of its log, when a node it started exits
# before it serves; the nodes it started are then stopped again. stop,
# restart and down fail when a node does not stop (SIGTERM, then SIGKILL
# after 10 s), or when a coordd this script did not start still holds a
# node's data directory.
#
# COORDD_BIN:   the coordd binary to run (default: built from this tree into DIR/bin).
# COORDCTL_BIN: with TLS=1, the coordctl binary (default: built into DIR/bin;
#               DIR/bin/coordctl is always there, for the commands in docs/).
# BASE_PORT:    node N uses BASE_PORT+10*(N-1) for gRPC, +1 for metrics and
#               the HTTP API, +2 for Raft (default 7410: gRPC on 7410, 7420, 7430).
# TLS=1:        mutual TLS everywhere: creates a development CA and certificates
#               in DIR/certs (coordctl certs dev: node1..node3 and a client
#               "admin"), and prints the COORD_TLS_* variables coordctl reads.
# ACL_FILE:     with TLS=1, an ACL file the nodes enforce (reloaded on SIGHUP).
# The first up records BASE_PORT, TLS and ACL_FILE in DIR/cluster.env; later
# commands on DIR use them (a different BASE_PORT or TLS is refused). up
# writes DIR/endpoints (the comma-separated gRPC addresses) and prints
# COORD_ENDPOINTS=...
set -euo pipefail

usage() {
  echo "usage: $0 up|down|status DIR" >&2
  echo "       $0 stop|restart DIR N    (N = 1, 2 or 3)" >&2
  exit 2
}
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
node=""
case "$cmd" in
up | down | status) [ $# -eq 2 ] || usage ;;
stop | restart)
  [ $# -eq 3 ] || usage
  node=$3
  case "$node" in 1 | 2 | 3) ;; *) usage ;; esac
  ;;
*) usage ;;
esac
here=$(cd -P "$(dirname "$0")/.." && pwd)
nodes=(1 2 3)

if [ "$cmd" = up ]; then mkdir -p "$dir"; fi
if [ ! -d "$dir" ]; then
  echo "$dir: no such directory (start a cluster with: $0 up $dir)" >&2
  exit 1
fi
dir=$(cd "$dir" && pwd)

# The settings of the first up, unless this is the first.
saved_base="" saved_tls="" saved_acl=""
if [ -f "$dir/cluster.env" ]; then
  while IFS='=' read -r k v; do
    case "$k" in
    BASE_PORT) saved_base=$v ;;
    TLS) saved_tls=$v ;;
    ACL_FILE) saved_acl=$v ;;
    esac
  done <"$dir/cluster.env"
fi
base=${BASE_PORT:-${saved_base:-7410}}
tls=${TLS:-${saved_tls:-0}}
[ "$tls" = 1 ] || tls=0
acl=${ACL_FILE:-$saved_acl}
if [ -n "$saved_base" ] && [ "$base" != "$saved_base" ]; then
  echo "$dir was started with BASE_PORT=$saved_base: unset BASE_PORT, or use another directory" >&2
  exit 1
fi
if [ -n "$saved_tls" ] && [ "$tls" != "$saved_tls" ]; then
  if [ "$saved_tls" = 1 ]; then was="with TLS=1"; else was="without TLS"; fi
  echo "$dir was started $was: use the same setting, or another directory" >&2
  exit 1
fi
if [ -n "$acl" ] && [ -f "$acl" ]; then acl=$(cd "$(dirname "$acl")" && pwd)/$(basename "$acl"); fi

grpc_port() { echo $((base + 10 * ($1 - 1))); }
http_port() { echo $((base + 10 * ($1 - 1) + 1)); }
raft_port() { echo $((base + 10 * ($1 - 1) + 2)); }

peers="" endpoints=""
for n in "${nodes[@]}"; do
  peers="${peers:+$peers,}node$n=127.0.0.1:$(raft_port "$n")"
  endpoints="${endpoints:+$endpoints,}127.0.0.1:$(grpc_port "$n")"
done
ctl=${COORDCTL_BIN:-$dir/bin/coordctl}
if [ "$cmd" != up ] && [ "$cmd" != restart ] && [ ! -x "$ctl" ] && command -v coordctl >/dev/null; then
  ctl=$(command -v coordctl)
fi
tls_env() {
  export COORD_TLS_CERT="$dir/certs/admin.pem" COORD_TLS_KEY="$dir/certs/admin-key.pem" COORD_TLS_CA="$dir/certs/ca.pem"
}

# node_pid N prints node N's PID when it is running: the PID in its file is
# alive and is a coordd on this node's data directory (not a reused PID,
# not a zombie).
node_pid() {
  local f="$dir/node$1.pid" pid
  [ -f "$f" ] || return 1
  pid=$(cat "$f" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  if [ -d /proc/self ]; then
    [ -r "/proc/$pid/cmdline" ] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF "$dir/node$1" || return 1
  fi
  echo "$pid"
}

# lock_holder N prints the PID of the process holding node N's data
# directory lock (coordd's flock on DIR/nodeN/LOCK), read from /proc/locks.
lock_holder() {
  local f="$dir/node$1/LOCK" ino dev
  [ -f "$f" ] && [ -r /proc/locks ] || return 1
  ino=$(stat -c %i "$f" 2>/dev/null) || return 1
  dev=$(stat -c %d "$f" 2>/dev/null) || return 1
  dev=$(printf '%02x:%02x' $(((dev >> 8) & 0xfff)) $(((dev & 0xff) | ((dev >> 12) & 0xfff00))))
  awk -v want="$dev:$ino" '$2 == "FLOCK" && $6 == want { print $5; found = 1; exit } END { exit !found }' /proc/locks
}

# healthz PORT prints the body of GET /healthz ("ok" when the node knows a
# leader), or nothing when the node does not answer within a second.
healthz() {
  local line body=0 out=""
  { exec 3<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 1
  printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3 2>/dev/null || { exec 3<&-; return 1; }
  while IFS= read -r -t 1 line <&3; do
    line=${line%$'\r'}
    if [ $body = 1 ]; then out=$line; break; fi
    [ -n "$line" ] || body=1
  done
  exec 3<&-
  [ -n "$out" ] && echo "$out"
}

# health N: one word on node N's health; success when it serves with a leader.
health() {
  local h
  if [ "$tls" = 1 ]; then
    h=$("$ctl" --endpoints "127.0.0.1:$(grpc_port "$1")" --timeout 1s -o json status 2>/dev/null) || { echo "not answering"; return 1; }
    if grep -Eq '"leader_id": *"[^"]' <<<"$h"; then echo "ok"; return 0; fi
    echo "no leader"
    return 1
  fi
  h=$(healthz "$(http_port "$1")") || { echo "not answering"; return 1; }
  echo "$h"
  [ "$h" = ok ]
}

# members_registered: with TLS, every member published its gRPC address
# (then any node forwards to the leader).
members_registered() {
  [ "$("$ctl" --endpoints "$endpoints" --timeout 1s -o json members 2>/dev/null | grep -Ec '"grpc_address": *"1')" = 3 ]
}

start_node() {
  local n=$1 p args
  p=$(grpc_port "$n")
  args=(--id "node$n" --data-dir "$dir/node$n" --grpc-addr "127.0.0.1:$p"
    --http-addr "127.0.0.1:$(http_port "$n")" --raft-addr "127.0.0.1:$(raft_port "$n")" --peers "$peers")
  if [ "$tls" = 1 ]; then
    args+=(--tls-cert "$dir/certs/node$n.pem" --tls-key "$dir/certs/node$n-key.pem" --tls-ca "$dir/certs/ca.pem")
    if [ -n "$acl" ]; then args+=(--acl-file "$acl"); fi
  fi
  printf '=== %s local-cluster.sh: starting node%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$n" >>"$dir/node$n.log"
  "$bin" "${args[@]}" </dev/null >>"$dir/node$n.log" 2>&1 &
  echo $! >"$dir/node$n.pid"
}

# stop_node N stops node N by its PID: SIGTERM (and SIGCONT, for a frozen
# node), SIGKILL after 10 s. Fails when it does not stop.
stop_node() {
  local n=$1 pid
  if ! pid=$(node_pid "$n"); then
    rm -f "$dir/node$n.pid"
    echo "node$n: not running"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true
  if await_exit "$n" "$pid" 100 stopped; then
    return 0
  fi
  echo "node$n: pid $pid did not stop within 10 s of SIGTERM: SIGKILL" >&2
  kill -KILL "$pid" 2>/dev/null || true
  if await_exit "$n" "$pid" 50 killed; then
    return 0
  fi
  echo "node$n: pid $pid does not stop" >&2
  return 1
}

# await_exit N PID TRIES WHAT waits up to TRIES x 0.1 s for node N to exit;
# then it removes DIR/nodeN.pid and says WHAT. Fails when N still runs.
await_exit() {
  local n=$1 pid=$2 tries=$3 what=$4
  for _ in $(seq 1 "$tries"); do
    if ! node_pid "$n" >/dev/null; then
      rm -f "$dir/node$n.pid"
      echo "node$n: $what (pid $pid)"
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# check_unheld N fails when a process not in DIR/nodeN.pid holds node N's
# data directory.
check_unheld() {
  local holder
  if holder=$(lock_holder "$1"); then
    echo "node$1: pid $holder holds $dir/node$1 but is not in $dir/node$1.pid (a coordd this script did not start): stop it by its PID" >&2
    return 1
  fi
}

# await_started N...: wait until every given node serves. A node that exits
# meanwhile fails the wait with the end of its log.
await_started() {
  local n pid all code
  for _ in $(seq 1 300); do
    all=1
    for n in "$@"; do
      if ! node_pid "$n" >/dev/null; then
        pid=$(cat "$dir/node$n.pid" 2>/dev/null || true)
        code=""
        if [ -n "$pid" ]; then
          wait "$pid" 2>/dev/null && code=0 || code=$?
        fi
        echo "node$n exited during start${code:+ (exit status $code)}; the end of $dir/node$n.log:" >&2
        # This start's lines only (from the last marker), at most 15.
        awk '/^=== .* local-cluster.sh: starting / { n = 0 } { line[n++] = $0 }
          END { for (i = (n > 15 ? n - 15 : 0); i < n; i++) print "    " line[i] }' "$dir/node$n.log" >&2
        rm -f "$dir/node$n.pid"
        return 1
      fi
      health "$n" >/dev/null || all=0
    done
    if [ $all = 1 ] && { [ "$tls" != 1 ] || members_registered; }; then
      return 0
    fi
    sleep 0.1
  done
  echo "node(s) $* did not serve within 30 s (a leader needs two of the three nodes running); logs in $dir" >&2
  return 1
}

print_endpoints() {
  echo "COORD_ENDPOINTS=$endpoints"
  if [ "$tls" = 1 ]; then
    echo "COORD_TLS_CERT=$COORD_TLS_CERT COORD_TLS_KEY=$COORD_TLS_KEY COORD_TLS_CA=$COORD_TLS_CA"
  fi
}

build() {
  bin=${COORDD_BIN:-}
  if [ -z "$bin" ]; then
    bin="$dir/bin/coordd"
    (cd "$here" && go build -o "$bin" ./cmd/coordd)
  fi
  if [ "$tls" = 1 ]; then
    if [ -z "${COORDCTL_BIN:-}" ]; then
      (cd "$here" && go build -o "$ctl" ./cmd/coordctl)
    elif [ "$COORDCTL_BIN" != "$dir/bin/coordctl" ]; then
      mkdir -p "$dir/bin"
      ln -sf "$(cd "$(dirname "$COORDCTL_BIN")" && pwd)/$(basename "$COORDCTL_BIN")" "$dir/bin/coordctl"
    fi
    if [ ! -f "$dir/certs/admin.pem" ]; then
      "$ctl" certs dev --dir "$dir/certs" --nodes node1,node2,node3 --clients admin >/dev/null
    fi
  fi
}

if [ "$tls" = 1 ]; then tls_env; fi

case "$cmd" in
up)
  printf 'BASE_PORT=%s\nTLS=%s\nACL_FILE=%s\n' "$base" "$tls" "$acl" >"$dir/cluster.env"
  echo "$endpoints" >"$dir/endpoints"
  start=()
  for n in "${nodes[@]}"; do
    if pid=$(node_pid "$n"); then
      echo "node$n: running (pid $pid), left alone"
    else
      check_unheld "$n" || exit 1
      start+=("$n")
    fi
  done
  if [ ${#start[@]} -eq 0 ]; then
    print_endpoints
    exit 0
  fi
  build
  for n in "${start[@]}"; do start_node "$n"; done
  if ! await_started "${start[@]}"; then
    for n in "${start[@]}"; do stop_node "$n" >/dev/null || true; done
    echo "up failed: stopped the node(s) it had started (${start[*]})" >&2
    exit 1
  fi
  for n in "${start[@]}"; do echo "node$n: started (pid $(cat "$dir/node$n.pid"))"; done
  print_endpoints
  ;;
restart)
  stop_node "$node" || exit 1
  check_unheld "$node" || exit 1
  build
  start_node "$node"
  await_started "$node" || exit 1
  echo "node$node: started (pid $(cat "$dir/node$node.pid"))"
  ;;
stop)
  stop_node "$node" || exit 1
  check_unheld "$node" || exit 1
  ;;
down)
  rc=0
  for n in "${nodes[@]}"; do stop_node "$n" || rc=1; done
  for n in "${nodes[@]}"; do check_unheld "$n" || rc=1; done
  exit $rc
  ;;
status)
  rc=0
  for n in "${nodes[@]}"; do
    if pid=$(node_pid "$n"); then
      printf 'node%s  running  pid %-7s  grpc 127.0.0.1:%s  health: %s\n' "$n" "$pid" "$(grpc_port "$n")" "$(health "$n" || true)"
    elif holder=$(lock_holder "$n"); then
      printf 'node%s  running  pid %-7s  grpc 127.0.0.1:%s  NOT started by this script (not in node%s.pid)\n' "$n" "$holder" "$(grpc_port "$n")" "$n"
      rc=3
    else
      printf 'node%s  stopped                 log %s\n' "$n" "$dir/node$n.log"
      rc=3
    fi
  done
  exit $rc
  ;;
esac
