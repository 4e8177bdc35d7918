// Package openapi holds the OpenAPI 3.0 document of the node's HTTP/JSON
// API, generated from the protos and proto/coord/v1/coord_http.yaml by
// scripts/genproto.sh (protoc-gen-openapiv2, then internal/fixdoc), and
// served by every node at /v1/openapi.json.
package openapi

import (
	_ "embed"
	"net/http"
)

// Document is the OpenAPI document (JSON).
//
//go:embed coordd.json
var Document []byte

// Path is where a node serves Document.
const Path = "/v1/openapi.json"

// Handler serves Document to a GET or HEAD.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(Document)
	})
}
