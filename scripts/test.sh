#!/usr/bin/env bash
# The test command: everything a fresh machine needs, then vet and the race-
# enabled test suite. Extra arguments go to `go test` (e.g. -run, -v).
#   scripts/test.sh                 # the default suite (about 15 minutes on 2 cores, cold cache)
#   COORDD_FUZZTIME=60s scripts/test.sh   # also fuzz the FSM, the request
#                                         # decoders, the HTTP API, the ACL
#                                         # parser and the calendar in every
#                                         # zone, each for that long
#   COORDD_FAULTS_PROFILE=full scripts/test.sh   # the fault suite's full profile
set -euo pipefail
cd "$(dirname "$0")/.."
# Tools some tests need, from Debian's packages, installed when this machine
# lacks them and we are root: one line says so; apt's output goes to a log
# shown only if it fails; services a package ships are not started.
# (No protoc or buf: the generated code is committed and no test needs them;
# scripts/genproto.sh is the only user.)
install_missing() { # install_missing REASON "COMMANDS" PACKAGE...
  local reason=$1 cmds=$2 missing=0 c
  shift 2
  for c in $cmds; do command -v "$c" >/dev/null || missing=1; done
  if [ "$missing" = 0 ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then return 0; fi
  echo "test.sh: installing $* with apt-get ($reason)"
  local aptlog policy=/usr/sbin/policy-rc.d own_policy=0
  aptlog=$(mktemp)
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && own_policy=1; fi
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"; } >"$aptlog" 2>&1; then
    cat "$aptlog" >&2
    echo "test.sh: apt-get install $* failed (output above)" >&2
    [ "$own_policy" = 0 ] || rm -f "$policy"
    rm -f "$aptlog"
    exit 1
  fi
  [ "$own_policy" = 0 ] || rm -f "$policy"
  rm -f "$aptlog"
}
install_missing "the fault suite's network namespaces need them" "iptables ip" iptables iproute2
install_missing "deploy/'s rule checks need promtool" "promtool" prometheus
install_missing "deploy/'s unit check needs systemd-analyze" "systemd-analyze" systemd
# Without chromium (not root, no apt) the console's browser test skips and
# says why, except in CI (CI set, as .ci/run does), where it fails.
install_missing "the console's browser test drives headless Chromium" "chromium" chromium
install_missing "the OpenAPI client test compiles and runs a generated TypeScript client" "node npm" nodejs npm
# That client's generator and runtime, at the versions of its lockfile.
if command -v npm >/dev/null; then (cd test/openapi && npm ci --no-audit --no-fund --loglevel=error); fi
# The Node delivery endpoint's Standard Webhooks library (TestDeliveryToANodeEndpoint).
if command -v npm >/dev/null; then (cd test/delivery-endpoint && npm ci --no-audit --no-fund --loglevel=error); fi
go mod download
# go.mod and go.sum must be exactly what `go mod tidy` writes.
if ! tidy=$(go mod tidy -diff 2>&1); then
  if grep -q '^diff ' <<<"$tidy"; then
    echo "test.sh: go.mod/go.sum are not tidy: run 'go mod tidy' and commit go.mod and go.sum" >&2
  else
    printf '%s\n' "$tidy" >&2
    echo "test.sh: go mod tidy -diff failed (output above)" >&2
  fi
  exit 1
fi
go vet ./...
go vet -tags faults ./integration/faults/
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null | grep -v '\.pb\.go$' || find . -name '*.go' ! -name '*.pb.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
# ./integration/ first: go test starts the packages' tests in the order
# given, and that one, the longest (real processes, mostly waiting), then
# runs beside the rest instead of after it. -parallel 4: its tests that
# call t.Parallel (clusters of their own, mostly waiting) run 4 at a time.
go test -race -count=1 -parallel 4 -timeout 20m "$@" ./integration/ ./...
# The Kubernetes manifests' validation: a module of its own (k8s.io/api).
(cd deploy/kubernetes && go mod tidy -diff >/dev/null && go vet ./... && go test -count=1 "$@" ./...)
# The commit-timeline reader of runtime traces (docs/benchmarks.md): a
# module of its own (golang.org/x/exp/trace).
(cd tools/tracecommit && go mod tidy -diff >/dev/null && go vet ./... && go test -count=1 "$@" ./...)
# The tenant-flood test measures latency, which the race detector would
# measure instead: it runs here without it (it skips under -race).
if [ $# -eq 0 ]; then go test -count=1 -timeout 5m -run '^TestQuotasKeepTheOtherTenantFast$' ./integration/; fi
# The fault-injection suite's short profile (real processes, about 6 minutes);
# COORDD_FAULTS_PROFILE=full runs the long one.
go test -tags faults -count=1 -timeout 30m "$@" ./integration/faults/
# The SDKs of other languages, each against real coordd processes.
if [ $# -eq 0 ] && command -v npm >/dev/null; then sdk/typescript/test.sh; fi
if [ $# -eq 0 ]; then sdk/python/test.sh; fi
if [ -n "${COORDD_FUZZTIME:-}" ]; then
  go test ./fsm -run '^$' -fuzz FuzzCommands -fuzztime "$COORDD_FUZZTIME"
  for target in FuzzRequests FuzzHTTPAPI; do
    go test ./api -run '^$' -fuzz "^$target\$" -fuzztime "$COORDD_FUZZTIME"
  done
  go test ./internal/auth -run '^$' -fuzz '^FuzzParseACL$' -fuzztime "$COORDD_FUZZTIME"
  go test ./internal/apijson -run '^$' -fuzz '^FuzzRoundTrip$' -fuzztime "$COORDD_FUZZTIME"
  go test ./schedule -run '^$' -fuzz '^FuzzCalendarZones$' -fuzztime "$COORDD_FUZZTIME"
  go test ./internal/jsonvalid -run '^$' -fuzz '^FuzzValid$' -fuzztime "$COORDD_FUZZTIME"
fi
