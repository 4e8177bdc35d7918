#!/usr/bin/env bash
# The test command: everything a fresh machine needs, then vet and the race-
# enabled test suite. Extra arguments go to `go test` (e.g. -run, -v).
#   scripts/test.sh                 # the default suite (a few minutes)
#   COORDD_FUZZTIME=60s scripts/test.sh   # also fuzz the FSM for that long
set -euo pipefail
cd "$(dirname "$0")/.."
go mod download
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null | grep -v '\.pb\.go$' || find . -name '*.go' ! -name '*.pb.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted" >&2; exit 1; fi
go test -race -count=1 -timeout 20m "$@" ./...
if [ -n "${COORDD_FUZZTIME:-}" ]; then
  go test ./fsm -run '^$' -fuzz FuzzCommands -fuzztime "$COORDD_FUZZTIME"
fi
