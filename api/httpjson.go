package api

import (
	"encoding/json"
	"io"
	"net/url"
	"reflect"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/grpc-ecosystem/grpc-gateway/v2/utilities"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/coordd/coordd/internal/apijson"
)

// The HTTP gateway's JSON is internal/apijson's (docs/http-api.md,
// "Conventions"): JSON-valued payloads, short enum names, RFC 3339 times
// and "90s" durations.

// httpJSON is the gateway's marshaler.
type httpJSON struct{ pb runtime.JSONPb }

func newHTTPJSON() *httpJSON { return &httpJSON{} }

func (*httpJSON) ContentType(any) string { return "application/json" }

// Marshal writes an answer: a message, or the gateway's stream chunk
// {"result": message} (its error chunks carry no message).
func (j *httpJSON) Marshal(v any) ([]byte, error) {
	switch m := v.(type) {
	case proto.Message:
		return apijson.Marshal(m)
	case map[string]any:
		if msg, ok := m["result"].(proto.Message); ok && len(m) == 1 {
			b, err := apijson.Marshal(msg)
			if err != nil {
				return nil, err
			}
			return json.Marshal(map[string]json.RawMessage{"result": b})
		}
	}
	return j.pb.Marshal(v)
}

func (j *httpJSON) Unmarshal(data []byte, v any) error {
	if m, ok := v.(proto.Message); ok {
		return apijson.Unmarshal(data, m)
	}
	// A body mapped to one field of the request (PutSchedule's "spec"):
	// the gateway decodes into that field, a pointer to a message pointer.
	if pv := reflect.ValueOf(v); pv.Kind() == reflect.Pointer && !pv.IsNil() && pv.Elem().Kind() == reflect.Pointer {
		if _, ok := pv.Elem().Interface().(proto.Message); ok {
			if pv.Elem().IsNil() {
				pv.Elem().Set(reflect.New(pv.Elem().Type().Elem()))
			}
			return apijson.Unmarshal(data, pv.Elem().Interface().(proto.Message))
		}
	}
	return j.pb.Unmarshal(data, v)
}

func (j *httpJSON) NewDecoder(r io.Reader) runtime.Decoder {
	d := json.NewDecoder(r)
	return runtime.DecoderFunc(func(v any) error {
		var raw json.RawMessage
		if err := d.Decode(&raw); err != nil {
			return err
		}
		return j.Unmarshal(raw, v)
	})
}

func (j *httpJSON) NewEncoder(w io.Writer) runtime.Encoder {
	return runtime.EncoderFunc(func(v any) error {
		b, err := j.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	})
}

// httpQuery is the gateway's query parser: enum values by their short
// names, then the gateway's own parsing.
type httpQuery struct{ runtime.DefaultQueryParser }

func (q *httpQuery) Parse(msg proto.Message, values url.Values, filter *utilities.DoubleArray) error {
	md := msg.ProtoReflect().Descriptor()
	mapped := make(url.Values, len(values))
	for key, vs := range values {
		if fd := apijson.FieldByPath(md, key); fd != nil && fd.Kind() == protoreflect.EnumKind {
			full := make([]string, len(vs))
			for i, v := range vs {
				full[i] = apijson.EnumFull(fd.Enum(), v)
			}
			vs = full
		}
		mapped[key] = vs
	}
	return q.DefaultQueryParser.Parse(msg, mapped, filter)
}
