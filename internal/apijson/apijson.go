// Package apijson is the JSON form of the API (docs/http-api.md,
// "Conventions"), one for the HTTP gateway, coordctl's -o json and files:
// protojson with the proto field names and every field, and three rules
// that make it JSON a person writes by hand:
//
//   - bytes fields (args, result, payload, value) are JSON values embedded
//     as they are, not base64: "args": {"invoice": 44}. A request's value
//     is stored as its compact JSON text; an answer embeds stored bytes that
//     are JSON as they are, empty as null, and anything else (bytes written
//     over gRPC that are not JSON) as a JSON string of their text;
//   - enums are their short names, the type's prefix cut the way error
//     reasons are written ("DEAD", "QUEUE_JOB"); a request (a body or a
//     query parameter) may give the short name in any case or the full name;
//   - durations in a request may be any Go duration ("90s", "1m30s",
//     "250ms"), not only protojson's seconds ("90s", "0.250s").
//
// Times are google.protobuf.Timestamp (RFC 3339) and Duration in the protos
// themselves, so gRPC and HTTP say the same.
package apijson

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

var marshalOpts = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// Marshal is protojson (proto field names, every field) with the mapping's rules applied to its output.
func Marshal(m proto.Message) ([]byte, error) {
	b, err := marshalOpts.Marshal(m)
	if err != nil {
		return nil, err
	}
	md := m.ProtoReflect().Descriptor()
	if !needsMapping(md) {
		return b, nil
	}
	out, err := mapMessage(md, b, toHTTP)
	if err != nil {
		return nil, fmt.Errorf("JSON mapping of %s: %w", md.FullName(), err)
	}
	return out, nil
}

// Unmarshal is protojson of the request with the mapping's rules undone
// first. A body that is not a JSON object is left to protojson, whose error
// names what is wrong.
func Unmarshal(data []byte, m proto.Message) error {
	md := m.ProtoReflect().Descriptor()
	if needsMapping(md) {
		if out, err := mapMessage(md, data, fromHTTP); err == nil {
			data = out
		} else {
			var fe fieldError
			if errors.As(err, &fe) {
				return fe
			}
		}
	}
	return protojson.Unmarshal(data, m)
}

// fieldError is a request field the mapping refuses (protojson's errors for
// the rest name the field the same way).
type fieldError struct {
	field, reason string
}

func (e fieldError) Error() string {
	return fmt.Sprintf("invalid value for field %s: %s", e.field, e.reason)
}

type direction int

const (
	toHTTP direction = iota
	fromHTTP
)

// needsMapping reports whether a message holds a bytes or enum field at
// any depth (cached by descriptor). The cache holds finished answers
// only: a goroutine that finds no entry computes the answer itself, so a
// concurrent first call never reads a half-made one.
func needsMapping(md protoreflect.MessageDescriptor) bool {
	if v, ok := mappingCache.Load(md.FullName()); ok {
		return v.(bool)
	}
	need := findsMapping(md, map[protoreflect.FullName]bool{})
	mappingCache.Store(md.FullName(), need)
	return need
}

// findsMapping reports whether md or a message it reaches holds a field
// to map; visited are the messages already being looked at (a
// recursive message counts once).
func findsMapping(md protoreflect.MessageDescriptor, visited map[protoreflect.FullName]bool) bool {
	if v, ok := mappingCache.Load(md.FullName()); ok {
		return v.(bool)
	}
	if visited[md.FullName()] {
		return false
	}
	visited[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		switch fd.Kind() {
		case protoreflect.BytesKind, protoreflect.EnumKind:
			if !isNullValue(fd) {
				return true
			}
		case protoreflect.MessageKind, protoreflect.GroupKind:
			if isDuration(fd.Message()) || isTimestamp(fd.Message()) || (!wellKnown(fd.Message()) && findsMapping(fd.Message(), visited)) {
				return true
			}
		}
	}
	return false
}

var mappingCache sync.Map // protoreflect.FullName → bool

func wellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf"
}

func isDuration(md protoreflect.MessageDescriptor) bool {
	return md.FullName() == "google.protobuf.Duration"
}

func isTimestamp(md protoreflect.MessageDescriptor) bool {
	return md.FullName() == "google.protobuf.Timestamp"
}

func isNullValue(fd protoreflect.FieldDescriptor) bool {
	return fd.Kind() == protoreflect.EnumKind && fd.Enum().FullName() == "google.protobuf.NullValue"
}

// mapMessage rewrites one message's JSON object field by field.
func mapMessage(md protoreflect.MessageDescriptor, data []byte, dir direction) ([]byte, error) {
	if bytes.Equal(bytes.TrimSpace(data), []byte("null")) {
		return data, nil
	}
	if dir == toHTTP {
		return mapAnswer(md, data)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(data, &obj); err != nil {
		return nil, err
	}
	for key, raw := range obj {
		fd := fieldByJSONKey(md, key)
		if fd == nil {
			continue // protojson refuses it by name
		}
		v, err := mapField(fd, raw, dir)
		if err != nil {
			return nil, err
		}
		obj[key] = v
	}
	return json.Marshal(obj)
}

// mapAnswer rewrites an answer's object in one pass, keeping protojson's
// field order (by field number); only the fields that need it are mapped.
func mapAnswer(md protoreflect.MessageDescriptor, data []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	if _, err := d.Token(); err != nil { // {
		return nil, err
	}
	buf := bytes.NewBuffer(make([]byte, 0, len(data)+len(data)/4))
	buf.WriteByte('{')
	for i := 0; d.More(); i++ {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		if fd := fieldByJSONKey(md, key); fd != nil && fieldNeedsMapping(fd) {
			if v, err = mapField(fd, v, toHTTP); err != nil {
				return nil, err
			}
		}
		if i > 0 {
			buf.WriteByte(',')
		}
		k, _ := json.Marshal(key)
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// fieldNeedsMapping reports whether an answer's field can change under
// the mapping (a string or a number passes as protojson wrote it).
func fieldNeedsMapping(fd protoreflect.FieldDescriptor) bool {
	if fd.IsMap() {
		fd = fd.MapValue()
	}
	switch fd.Kind() {
	case protoreflect.BytesKind:
		return true
	case protoreflect.EnumKind:
		return !isNullValue(fd)
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return !wellKnown(fd.Message()) && needsMapping(fd.Message())
	}
	return false
}

func fieldByJSONKey(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	if fd := md.Fields().ByName(protoreflect.Name(key)); fd != nil {
		return fd
	}
	return md.Fields().ByJSONName(key)
}

// mapField rewrites one field's value: a list element by element, a map
// value by value.
func mapField(fd protoreflect.FieldDescriptor, raw json.RawMessage, dir direction) (json.RawMessage, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return raw, nil
	}
	switch {
	case fd.IsList():
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return raw, nil // protojson says what is wrong
		}
		for i, it := range items {
			v, err := mapValue(fd, it, dir)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		return json.Marshal(items)
	case fd.IsMap():
		var items map[string]json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return raw, nil
		}
		for k, it := range items {
			v, err := mapValue(fd.MapValue(), it, dir)
			if err != nil {
				return nil, err
			}
			items[k] = v
		}
		return json.Marshal(items)
	}
	return mapValue(fd, raw, dir)
}

func mapValue(fd protoreflect.FieldDescriptor, raw json.RawMessage, dir direction) (json.RawMessage, error) {
	switch fd.Kind() {
	case protoreflect.BytesKind:
		if dir == toHTTP {
			return bytesToHTTP(raw)
		}
		return bytesFromHTTP(raw)
	case protoreflect.EnumKind:
		if isNullValue(fd) {
			return raw, nil
		}
		return mapEnum(fd.Enum(), raw, dir), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		if isDuration(md) {
			if dir == fromHTTP {
				return durationFromHTTP(string(fd.Name()), raw)
			}
			return raw, nil
		}
		if isTimestamp(md) {
			if dir == fromHTTP {
				return raw, timestampFromHTTP(string(fd.Name()), raw)
			}
			return raw, nil
		}
		if wellKnown(md) || !needsMapping(md) {
			return raw, nil
		}
		v, err := mapMessage(md, raw, dir)
		if err != nil {
			var fe fieldError
			if errors.As(err, &fe) {
				return nil, err
			}
			return raw, nil // not an object: protojson says so
		}
		return v, nil
	}
	return raw, nil
}

// bytesToHTTP embeds stored bytes: JSON as it is, empty as null, other
// bytes as a JSON string of their text.
func bytesToHTTP(raw json.RawMessage) (json.RawMessage, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, err
	}
	switch {
	case len(b) == 0:
		return json.RawMessage("null"), nil
	case json.Valid(b):
		return b, nil
	}
	return json.Marshal(strings.ToValidUTF8(string(b), string(utf8.RuneError)))
}

// bytesFromHTTP stores a request's JSON value as its compact text.
func bytesFromHTTP(raw json.RawMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, err
	}
	return json.Marshal(base64.StdEncoding.EncodeToString(buf.Bytes()))
}

// enumPrefix is the prefix an enum's values share: JOB_STATE_ for
// JobState (the buf rule ENUM_VALUE_PREFIX keeps them so).
func enumPrefix(ed protoreflect.EnumDescriptor) string {
	name := string(ed.Name())
	var b strings.Builder
	for i, r := range name {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return strings.ToUpper(b.String()) + "_"
}

// enumShort is an enum value's HTTP name.
func enumShort(ed protoreflect.EnumDescriptor, full string) string {
	if short, ok := strings.CutPrefix(full, enumPrefix(ed)); ok && short != "" {
		return short
	}
	return full
}

// EnumFull is the full name of a request's enum value, from its short
// name in any case or its full name; anything else is left as it is (for
// protojson to refuse by name).
func EnumFull(ed protoreflect.EnumDescriptor, name string) string {
	values := ed.Values()
	if v := values.ByName(protoreflect.Name(name)); v != nil {
		return name
	}
	want := enumPrefix(ed) + strings.ToUpper(name)
	if v := values.ByName(protoreflect.Name(want)); v != nil {
		return want
	}
	if v := values.ByName(protoreflect.Name(strings.ToUpper(name))); v != nil {
		return strings.ToUpper(name)
	}
	return name
}

func mapEnum(ed protoreflect.EnumDescriptor, raw json.RawMessage, dir direction) json.RawMessage {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return raw // a number
	}
	if dir == toHTTP {
		s = enumShort(ed, s)
	} else {
		s = EnumFull(ed, s)
	}
	out, _ := json.Marshal(s)
	return out
}

// timestampFromHTTP refuses a time that is not RFC 3339, naming the field
// (protojson's own error does not).
func timestampFromHTTP(field string, raw json.RawMessage) error {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return fieldError{field: field, reason: "must be an RFC 3339 time string"}
	}
	if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
		return fieldError{field: field, reason: fmt.Sprintf("%q is not an RFC 3339 time (write it like \"2026-09-25T00:05:00Z\" or with an offset, \"2026-09-25T00:05:00-03:00\")", s)}
	}
	return nil
}

// durationFromHTTP takes any Go duration ("1m30s", "250ms") and writes it
// as protojson's seconds; protojson's own form passes unchanged.
func durationFromHTTP(field string, raw json.RawMessage) (json.RawMessage, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fieldError{field: field, reason: "must be a duration string like \"90s\""}
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fieldError{field: field, reason: fmt.Sprintf("%q is not a duration (write it like \"90s\", \"1m30s\" or \"250ms\")", s)}
	}
	return json.Marshal(fmt.Sprintf("%.9fs", d.Seconds()))
}

// FieldByPath resolves a query parameter's dotted path (a.b.c) to its
// field, by proto or JSON names; nil when there is none.
func FieldByPath(md protoreflect.MessageDescriptor, key string) protoreflect.FieldDescriptor {
	parts := strings.Split(key, ".")
	for i, p := range parts {
		fd := fieldByJSONKey(md, p)
		if fd == nil {
			return nil
		}
		if i == len(parts)-1 {
			return fd
		}
		if fd.Message() == nil {
			return nil
		}
		md = fd.Message()
	}
	return nil
}
