package fsm

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
)

// populate sets fields of m to random values, every kind of field the
// schema has: each oneof gets one of its members, lists and maps 0-3
// elements, bytes sometimes empty (present but zero-length) and strings
// valid UTF-8 (what protobuf-go's Marshal writes), nested messages down to
// depth.
func populate(m protoreflect.Message, r *rand.Rand, depth int) {
	fields := m.Descriptor().Fields()
	oneofs := m.Descriptor().Oneofs()
	chosen := map[protoreflect.FullName]protoreflect.FieldDescriptor{}
	for i := range oneofs.Len() {
		o := oneofs.Get(i)
		if o.IsSynthetic() || r.IntN(4) == 0 {
			continue
		}
		chosen[o.FullName()] = o.Fields().Get(r.IntN(o.Fields().Len()))
	}
	for i := range fields.Len() {
		f := fields.Get(i)
		if o := f.ContainingOneof(); o != nil && !o.IsSynthetic() {
			if chosen[o.FullName()] != f {
				continue
			}
		} else if r.IntN(3) == 0 {
			continue
		}
		switch {
		case f.IsMap():
			mp := m.Mutable(f).Map()
			for range r.IntN(4) {
				k := scalar(f.MapKey(), r).MapKey()
				if f.MapValue().Kind() == protoreflect.MessageKind {
					v := mp.NewValue()
					if depth > 0 {
						populate(v.Message(), r, depth-1)
					}
					mp.Set(k, v)
				} else {
					mp.Set(k, scalar(f.MapValue(), r))
				}
			}
		case f.IsList():
			l := m.Mutable(f).List()
			for range r.IntN(4) {
				if f.Kind() == protoreflect.MessageKind {
					v := l.NewElement()
					if depth > 0 {
						populate(v.Message(), r, depth-1)
					}
					l.Append(v)
				} else {
					l.Append(scalar(f, r))
				}
			}
		case f.Kind() == protoreflect.MessageKind:
			if depth > 0 {
				populate(m.Mutable(f).Message(), r, depth-1)
			} else {
				m.Mutable(f)
			}
		default:
			m.Set(f, scalar(f, r))
		}
	}
}

func scalar(f protoreflect.FieldDescriptor, r *rand.Rand) protoreflect.Value {
	n := func() uint64 {
		switch r.IntN(4) {
		case 0:
			return 0
		case 1:
			return uint64(r.IntN(300))
		default:
			return r.Uint64()
		}
	}
	switch f.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(r.IntN(2) == 1)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(r.IntN(6)))
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(n()))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(int64(n()))
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(n()))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(n())
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(r.Float32())
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(r.Float64())
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(strings.Repeat("qé☃", r.IntN(4)))
	case protoreflect.BytesKind:
		b := make([]byte, r.IntN(3)*100)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return protoreflect.ValueOfBytes(b)
	}
	panic("unhandled kind " + f.Kind().String())
}

// sameDecode checks that decodeCommand makes from data exactly the message
// protobuf-go's Unmarshal makes: equal as messages, and equal field by
// field, so that a present empty bytes field is not nil on one side only.
func sameDecode(t *testing.T, data []byte) {
	t.Helper()
	want, got := &fsmv1.Command{}, &fsmv1.Command{}
	werr := proto.Unmarshal(data, want)
	gerr := decodeCommand(data, got)
	if werr != nil || gerr != nil {
		t.Fatalf("decoding %x: protobuf-go: %v, decodeCommand: %v", data, werr, gerr)
	}
	// proto.Equal also initialises both sides' internal state the same way,
	// which reflect.DeepEqual then compares along with every field.
	if !proto.Equal(want, got) || !reflect.DeepEqual(want, got) {
		t.Fatalf("decoding %x:\nprotobuf-go:   %v\ndecodeCommand: %v", data, want, got)
	}
}

// TestDecodeCommandAsProtobuf: every field of every command (random values,
// every oneof member, nested batches) decodes as protobuf-go decodes it.
func TestDecodeCommandAsProtobuf(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	bodies := (&fsmv1.Command{}).ProtoReflect().Descriptor().Oneofs().ByName("body").Fields()
	seen := map[protoreflect.Name]bool{}
	for i := range 3000 {
		cmd := &fsmv1.Command{}
		m := cmd.ProtoReflect()
		populate(m, r, 4)
		f := bodies.Get(i % bodies.Len())
		m.Clear(f)
		populate(m.Mutable(f).Message(), r, 4)
		seen[f.Name()] = true
		data, err := proto.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		sameDecode(t, data)
	}
	if len(seen) != bodies.Len() || bodies.Len() < 20 {
		t.Fatalf("%d of %d command bodies covered", len(seen), bodies.Len())
	}
	// A real entry: a proposer's batch of submits.
	data, err := proto.Marshal(EnvelopeAt(1, t0, &fsmv1.Batch{Commands: []*fsmv1.Command{
		EnvelopeAt(1, t0, &fsmv1.SubmitJobs{Jobs: []*fsmv1.QueueJobSpec{jspec("q", "k", unique("u")), jspec("q", "k")}}),
		EnvelopeAt(2, t0+1, &fsmv1.Tick{}),
	}}))
	if err != nil {
		t.Fatal(err)
	}
	sameDecode(t, data)
}

// FuzzDecodeCommand: decodeCommand never panics, and on what protobuf-go's
// Marshal writes (the only thing in a log) it decodes as protobuf-go does.
func FuzzDecodeCommand(f *testing.F) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		cmd := &fsmv1.Command{}
		populate(cmd.ProtoReflect(), r, 3)
		data, _ := proto.Marshal(cmd)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = decodeCommand(data, &fsmv1.Command{}) // must not panic
		cmd := &fsmv1.Command{}
		if proto.Unmarshal(data, cmd) != nil {
			return
		}
		dropUnknown(cmd.ProtoReflect())
		norm, err := proto.Marshal(cmd)
		if err != nil {
			return
		}
		sameDecode(t, norm)
	})
}

// dropUnknown clears the unknown fields of m and of every message in it
// (the proposer's commands have none).
func dropUnknown(m protoreflect.Message) {
	m.SetUnknown(nil)
	m.Range(func(f protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case f.IsMap():
			if f.MapValue().Kind() == protoreflect.MessageKind {
				v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
					dropUnknown(e.Message())
					return true
				})
			}
		case f.IsList():
			if f.Kind() == protoreflect.MessageKind {
				for i := range v.List().Len() {
					dropUnknown(v.List().Get(i).Message())
				}
			}
		case f.Kind() == protoreflect.MessageKind:
			dropUnknown(v.Message())
		}
		return true
	})
}

// BenchmarkDecodeCommand: one entry as the proposer makes it under single
// submits (a batch of coalesced submits of 8 jobs with 200-byte args, 96
// jobs), decoded by protobuf-go and by decodeCommand.
func BenchmarkDecodeCommand(b *testing.B) {
	args := []byte(`{"n":` + strings.Repeat("1", 193) + `}`)
	var cmds []*fsmv1.Command
	for range 12 {
		var specs []*fsmv1.QueueJobSpec
		for range 8 {
			s := &fsmv1.QueueJobSpec{Queue: "bench", Kind: "bench", Args: args}
			FillJobDefaults(s)
			specs = append(specs, s)
		}
		cmds = append(cmds, EnvelopeAt(1, t0, &fsmv1.SubmitJobs{Jobs: specs}))
	}
	data, err := proto.Marshal(EnvelopeAt(1, t0, &fsmv1.Batch{Commands: cmds}))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		decode func([]byte, *fsmv1.Command) error
	}{
		{"protobuf-go", func(d []byte, m *fsmv1.Command) error { return proto.Unmarshal(d, m) }},
		{"generated", decodeCommand},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if err := c.decode(data, &fsmv1.Command{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
