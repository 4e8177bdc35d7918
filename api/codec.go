package api

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// A request that does not decode is bad input, not an internal error:
// gRPC answers a codec's error as INTERNAL ("failed to unmarshal the
// received message"), so the server's codec (requestCodec) keeps the
// decoding error beside the message and lets the call go on to the
// interceptors, which refuse it (refuseUndecodable) with INVALID_ARGUMENT
// naming the field: the first string field that is not valid UTF-8 (a
// proto3 string must be), found by walking the wire bytes; "the request"
// for anything else that does not parse. No handler ever sees such a
// message.

// requestCodec is the proto codec, but a request that fails to decode is
// recorded in bad (by its message) instead of failing the call there.
type requestCodec struct {
	encoding.CodecV2
	bad *sync.Map // proto.Message → error (*invalidArgError)
}

func newRequestCodec() requestCodec {
	return requestCodec{CodecV2: encoding.GetCodecV2("proto"), bad: &sync.Map{}}
}

func (c requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.CodecV2.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	c.bad.Store(m, undecodable(data.Materialize(), m.ProtoReflect().Descriptor(), err))
	proto.Reset(m)
	return nil
}

// take returns (and forgets) the decoding error recorded for req.
func (c requestCodec) take(req any) error {
	m, ok := req.(proto.Message)
	if !ok {
		return nil
	}
	if err, ok := c.bad.LoadAndDelete(m); ok {
		return toStatus(err.(error))
	}
	return nil
}

// unary refuses an undecodable request before anything else runs.
func (c requestCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.take(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// stream refuses every undecodable message a stream's handler receives.
func (c requestCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &decodedStream{ServerStream: ss, c: c})
}

type decodedStream struct {
	grpc.ServerStream
	c requestCodec
}

func (d *decodedStream) RecvMsg(m any) error {
	if err := d.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return d.c.take(m)
}

// undecodable is the INVALID_ARGUMENT for a request of descriptor md that
// failed to decode from b with err: naming the string field that is not
// valid UTF-8 (and the item's index in the request's first list), or the
// request.
func undecodable(b []byte, md protoreflect.MessageDescriptor, err error) error {
	names, path, index := badUTF8(b, md, "", -1)
	if names == nil {
		return invalidArg("request", "the request is not a valid %s message: %v", md.FullName(), err)
	}
	// Field names are the handlers': an item of a batch by its field and
	// index ("jobs[2].queue" is field "queue", index 2; "queues[1]" is
	// "queues", 1), a schedule's spec relative to the spec (it is the body
	// of the HTTP put: "spec.job.queue" is "job.queue").
	if index >= 0 && len(names) > 1 {
		names = names[1:]
	}
	if len(names) > 1 && names[0] == "spec" {
		names = names[1:]
	}
	field := strings.Join(names, ".")
	if index >= 0 {
		return invalidItem(index, field, "%s is not valid UTF-8", path)
	}
	return invalidArg(field, "%s is not valid UTF-8", path)
}

// badUTF8 walks the wire bytes b of a message of descriptor md and finds
// the first string field (a map's: the map) that is not valid UTF-8: its
// names from the request down, its path with list indexes ("jobs[2].queue"),
// and the index in the first list on the way (-1: none); nil when every
// string is valid (or b does not parse).
func badUTF8(b []byte, md protoreflect.MessageDescriptor, prefix string, index int) (names []string, path string, idx int) {
	count := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, "", -1
		}
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if typ != protowire.BytesType || fd == nil {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return nil, "", -1
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return nil, "", -1
		}
		b = b[n:]
		name, i := prefix+string(fd.Name()), index
		if fd.IsList() {
			name += fmt.Sprintf("[%d]", count[num])
			if i < 0 {
				i = count[num]
			}
			count[num]++
		}
		me := []string{string(fd.Name())}
		switch {
		case fd.Kind() == protoreflect.StringKind && !utf8.Valid(v):
			return me, name, i
		case fd.IsMap():
			if bad, _, _ := badUTF8(v, fd.Message(), "", -1); bad != nil {
				return me, name, index
			}
		case fd.Kind() == protoreflect.MessageKind:
			if bad, p, j := badUTF8(v, fd.Message(), name+".", i); bad != nil {
				return append(me, bad...), p, j
			}
		}
	}
	return nil, "", -1
}
