// Command fixdoc turns the OpenAPI 2.0 document protoc-gen-openapiv2 writes
// for coord_http.yaml (on standard input) into the OpenAPI 3.0 document the
// node serves (on standard output, api/openapi/coordd.json): it names the
// API, gives every operation the node's error body (api.HTTPError) as its
// other answers, and says how Watch's stream reports an error. Run by
// scripts/genproto.sh.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"google.golang.org/protobuf/reflect/protoreflect"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

const description = `The HTTP/JSON API of a coordd node (docs/http-api.md): leases and
their fencing tokens, windows, fenced commits, the job queue and its
workers, schedules, the cluster's status and a watch of changes. Field
names are the proto names; times are RFC 3339 strings and durations
strings like "90s"; args, results, payloads and values are JSON values
(not base64); enums are their short names ("DEAD", "QUEUE_JOB"); 64-bit
integers are strings in answers. Every error answer is an Error: the gRPC
code's name, the coord.v1.ErrorReason without its prefix, a message and
metadata.`

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fixdoc:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var doc2 openapi2.T
	if err := json.NewDecoder(in).Decode(&doc2); err != nil {
		return err
	}
	doc2.Info = openapi3.Info{Title: "coordd", Version: "v1", Description: description}
	doc2.Tags = nil // the service names, each with no description
	str := func(desc string) *openapi2.SchemaRef {
		return &openapi2.SchemaRef{Value: &openapi2.Schema{Type: &openapi3.Types{"string"}, Description: desc}}
	}
	doc2.Definitions["Error"] = &openapi2.SchemaRef{Value: &openapi2.Schema{
		Type:        &openapi3.Types{"object"},
		Description: "The body of every error answer (api.HTTPError).",
		Required:    []string{"code", "message"},
		Properties: map[string]*openapi2.SchemaRef{
			"code":    str("the gRPC code's name: INVALID_ARGUMENT, FAILED_PRECONDITION, ..."),
			"reason":  str("a coord.v1.ErrorReason without its ERROR_REASON_ prefix: STALE_TOKEN, ..."),
			"message": str("what went wrong, for a person"),
			"metadata": {Value: &openapi2.Schema{Type: &openapi3.Types{"object"},
				Description:          "the reason's details (errors.proto lists them per reason), e.g. field",
				AdditionalProperties: openapi3.AdditionalProperties{Schema: &openapi3.SchemaRef{Value: openapi3.NewStringSchema()}}}},
		},
	}}
	errRef := &openapi2.Response{Description: "An error (Error); the status maps its code (docs/http-api.md).",
		Schema: &openapi2.SchemaRef{Ref: "#/definitions/Error"}}
	for path, item := range doc2.Paths {
		for method, op := range item.Operations() {
			if op.Responses == nil {
				return fmt.Errorf("%s %s has no responses", method, path)
			}
			op.Responses.Set("default", errRef)
			if ok := op.Responses.Value("200"); ok != nil && ok.Schema != nil && ok.Schema.Value != nil {
				if _, stream := ok.Schema.Value.Properties["result"]; stream {
					ok.Description = "A stream: one JSON object a line, {\"result\": ...} for each message; " +
						"an error after the stream started is a last line {\"error\": {\"code\", \"message\", \"details\"}} (a google.rpc.Status)."
					ok.Schema.Value.Properties["error"] = &openapi2.SchemaRef{Value: &openapi2.Schema{
						Type: &openapi3.Types{"object"}, Description: "google.rpc.Status: code (a number), message, details"}}
				}
			}
		}
	}
	doc3, err := openapi2conv.ToV3(&doc2)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(doc3)
	if err != nil {
		return err
	}
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		return err
	}
	tree = jsonMapping(tree)
	shortDescriptions(tree)
	b, err := json.MarshalIndent(tree, "", "  ")
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

// jsonMapping rewrites the schemas the generator wrote from protojson's
// rules to the API's own (internal/apijson): a bytes field (string, format
// byte) is any JSON value, and an enum lists its short names.
func jsonMapping(v any) any {
	switch n := v.(type) {
	case map[string]any:
		if props, ok := n["properties"].(map[string]any); ok {
			for name, p := range props {
				if p, ok := p.(map[string]any); ok && durationFields[name] && p["type"] == "string" && p["format"] == nil {
					markDuration(p)
				}
			}
		}
		if name, ok := n["name"].(string); ok && n["in"] == "query" && durationFields[name] {
			if sch, ok := n["schema"].(map[string]any); ok && sch["type"] == "string" && sch["format"] == nil {
				markDuration(sch)
			}
		}
		if n["type"] == "string" && n["format"] == "byte" {
			delete(n, "type")
			delete(n, "format")
			d, _ := n["description"].(string)
			n["description"] = strings.TrimSpace(d + "\n\nA JSON value, embedded as it is (not base64).")
		}
		if values, ok := n["enum"].([]any); ok {
			prefix := enumPrefix(values)
			for i, e := range values {
				values[i] = strings.TrimPrefix(e.(string), prefix)
			}
			if d, ok := n["default"].(string); ok {
				n["default"] = strings.TrimPrefix(d, prefix)
			}
			for _, e := range values {
				if prefix != "" {
					enumNames[prefix+e.(string)] = e.(string)
				}
			}
		}
		for k, c := range n {
			n[k] = jsonMapping(c)
		}
	case []any:
		for i, c := range n {
			n[i] = jsonMapping(c)
		}
	}
	return v
}

// durationFields are the names of the API's google.protobuf.Duration
// fields (which the generator writes as a plain string).
var durationFields = func() map[string]bool {
	out := map[string]bool{}
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := 0; i < ms.Len(); i++ {
			fields := ms.Get(i).Fields()
			for j := 0; j < fields.Len(); j++ {
				if m := fields.Get(j).Message(); m != nil && m.FullName() == "google.protobuf.Duration" {
					out[string(fields.Get(j).Name())] = true
				}
			}
			walk(ms.Get(i).Messages())
		}
	}
	for _, f := range []protoreflect.FileDescriptor{coordv1.File_coord_v1_coord_proto, coordv1.File_coord_v1_queue_proto,
		coordv1.File_coord_v1_schedules_proto, coordv1.File_coord_v1_cluster_proto, coordv1.File_coord_v1_watch_proto} {
		walk(f.Messages())
	}
	return out
}()

func markDuration(p map[string]any) {
	p["format"] = "duration"
	d, _ := p["description"].(string)
	p["description"] = strings.TrimSpace(d + "\n\nA duration: seconds with an s (\"30s\", \"0.250s\"); a request may also write \"1m30s\" or \"250ms\".")
}

// enumNames maps the full names of enum values to their short names.
var enumNames = map[string]string{}

// shortDescriptions rewrites the generator's enum lists in descriptions:
// " - JOB_STATE_DEAD: DEAD: failed ..." → " - DEAD: failed ...".
func shortDescriptions(v any) {
	switch n := v.(type) {
	case map[string]any:
		if d, ok := n["description"].(string); ok {
			for full, short := range enumNames {
				d = strings.ReplaceAll(d, full+": "+short+": ", short+": ")
			}
			n["description"] = d
		}
		for _, c := range n {
			shortDescriptions(c)
		}
	case []any:
		for _, c := range n {
			shortDescriptions(c)
		}
	}
}

// enumPrefix is the prefix up to an underscore all values share
// (JOB_STATE_), as the API cuts it.
func enumPrefix(values []any) string {
	if len(values) < 2 {
		return ""
	}
	prefix, _ := values[0].(string)
	for _, v := range values[1:] {
		s, _ := v.(string)
		for !strings.HasPrefix(s, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	return prefix[:strings.LastIndex(prefix, "_")+1]
}
