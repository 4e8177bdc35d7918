#!/usr/bin/env bash
# Regenerates the Go code for proto/ (committed, so a build needs no protoc)
# and lints the protos with buf when it is installed.
# Needs protoc (Debian: apt-get install -y protobuf-compiler).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:$PATH"
command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler" >&2; exit 1; }
GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOFLAGS= go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
(cd proto && protoc -I . --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  $(find . -name '*.proto' | sed 's,^\./,,' | sort))
if command -v buf >/dev/null; then buf lint && echo "buf lint: clean"; fi
