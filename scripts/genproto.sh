#!/usr/bin/env bash
# Regenerates the Go code for proto/ (committed, so a build needs no protoc)
# and lints the protos with buf when it is installed.
# Needs protoc >= 3.15 (proto3 `optional`: RenewRequest.value); Debian
# bookworm's protobuf-compiler (3.21) works: apt-get install -y protobuf-compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(go env GOPATH)/bin:$PATH"
command -v protoc >/dev/null || { echo "protoc missing: apt-get install -y protobuf-compiler" >&2; exit 1; }
GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOFLAGS= go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
GOFLAGS= go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@v2.33.0
GOFLAGS= go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@v2.33.0
GOFLAGS= go install github.com/planetscale/vtprotobuf/cmd/protoc-gen-go-vtproto@v0.6.0
(cd proto && protoc -I . --go_out=. --go_opt=paths=source_relative \
  --go-grpc_out=. --go-grpc_opt=paths=source_relative \
  $(find . -name '*.proto' | sed 's,^\./,,' | sort))
# A generated decoder for the log's commands, which every node decodes for
# every entry it applies (fsm.decodeCommand: about a third less CPU than
# protobuf-go's table-driven decoder; snapshots are still read by
# protobuf-go). Only UnmarshalVT: everything written to the log is still
# encoded by protobuf-go, whose Marshal refuses a string that is not UTF-8
# (vtprotobuf's decoder does not check it).
(cd proto && protoc -I . --go-vtproto_out=. \
  --go-vtproto_opt=paths=source_relative,features=unmarshal coord/fsm/v1/fsm.proto)
# The protos with their comments, for gRPC reflection (api/reflection.go).
(cd proto && protoc -I . --include_source_info --include_imports --descriptor_set_out=../api/protodesc.binpb \
  $(find . -name '*.proto' | sed 's,^\./,,' | sort))
# The HTTP/JSON gateway for the calls listed in coord_http.yaml (no
# google.api annotations in the protos: the mapping lives in that file).
# It is a package of its own (standalone) so that the client SDK, which
# imports coordv1, does not pull in the gateway runtime.
gw=$(mktemp -d)
trap 'rm -rf "$gw"' EXIT
(cd proto && protoc -I . --grpc-gateway_out="$gw" --grpc-gateway_opt=paths=source_relative \
  --grpc-gateway_opt=standalone=true \
  --grpc-gateway_opt=grpc_api_configuration=coord/v1/coord_http.yaml \
  coord/v1/coord.proto coord/v1/queue.proto coord/v1/schedules.proto coord/v1/cluster.proto coord/v1/watch.proto)
mkdir -p proto/coord/v1/coordv1gw
for f in coord queue schedules cluster watch; do
  sed 's/^package coordv1$/package coordv1gw/; s/^Package coordv1 is/Package coordv1gw is/' \
    "$gw/coord/v1/$f.pb.gw.go" >"proto/coord/v1/coordv1gw/$f.pb.gw.go"
done
# The OpenAPI (2.0) document of the same routes, with the proto comments
# as descriptions and the proto field names (as the node writes them),
# served at /v1/openapi.json (api/openapi).
(cd proto && protoc -I . --openapiv2_out="$gw" \
  --openapiv2_opt=grpc_api_configuration=coord/v1/coord_http.yaml \
  --openapiv2_opt=allow_merge=true,merge_file_name=coordd,json_names_for_fields=false \
  --openapiv2_opt=disable_default_errors=true,preserve_rpc_order=true \
  coord/v1/coord.proto coord/v1/queue.proto coord/v1/schedules.proto coord/v1/cluster.proto coord/v1/watch.proto)
go run ./api/openapi/internal/fixdoc <"$gw/coordd.swagger.json" >api/openapi/coordd.json
# The Go short names of the enums (coorderr.LeaseLost, fsm.JobRunning, ...).
go run ./internal/enumgen
if command -v buf >/dev/null; then buf lint && echo "buf lint: clean"; fi
go run ./internal/msgen
