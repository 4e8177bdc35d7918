package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// rawCodec sends a request's bytes as they are (a client that sends what
// a Go client could not: invalid UTF-8 in a string field).
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}
func (rawCodec) Unmarshal(mem.BufferSlice, any) error { return nil }
func (rawCodec) Name() string                         { return "proto" }

// withBadByte is m encoded, with the placeholder "QQQQ" (once in m) made
// invalid UTF-8 ("Q\xffQQ": the same length, so the framing holds).
func withBadByte(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil || bytes.Count(b, []byte("QQQQ")) != 1 {
		t.Fatalf("%v: %v", m, err)
	}
	return bytes.Replace(b, []byte("QQQQ"), []byte("Q\xffQQ"), 1)
}

// A request that does not decode (invalid UTF-8 in a string field, or no
// protobuf at all) is INVALID_ARGUMENT naming the field (and the item's
// index), over a real gRPC connection: never INTERNAL.
func TestUndecodableRequestIsInvalidArgument(t *testing.T) {
	_, cc := startFuzzNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		method string
		req    proto.Message
		field  string
		index  string
	}{
		{coordv1.Queue_Submit_FullMethodName, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k"}, {Kind: "k", Queue: "QQQQ"}}}, "queue", "1"},
		{coordv1.Queue_Submit_FullMethodName, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "QQQQ"}}}, "kind", "0"},
		{coordv1.Queue_Submit_FullMethodName, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k", UniqueKey: "QQQQ"}}}, "unique_key", "0"},
		{coordv1.Queue_Submit_FullMethodName, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k", Labels: map[string]string{"a": "QQQQ"}}}}, "labels", "0"},
		{coordv1.Queue_Fetch_FullMethodName, &coordv1.QueueFetchRequest{Queues: []string{"q"}, Max: 1, WorkerId: "QQQQ"}, "worker_id", ""},
		{coordv1.Queue_Fetch_FullMethodName, &coordv1.QueueFetchRequest{Queues: []string{"q", "QQQQ"}, Max: 1, WorkerId: "w"}, "queues", "1"},
		{coordv1.Schedules_PutSchedule_FullMethodName, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "s", Schedule: "@daily", TimeZone: "QQQQ", Job: &coordv1.JobTemplate{Kind: "k"}}}, "time_zone", ""},
		{coordv1.Schedules_PutSchedule_FullMethodName, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "QQQQ", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k"}}}, "name", ""},
		{coordv1.Schedules_PutSchedule_FullMethodName, &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "s", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k", Queue: "QQQQ"}}}, "job.queue", ""},
		{coordv1.Schedules_GetSchedule_FullMethodName, &coordv1.GetScheduleRequest{Name: "QQQQ"}, "name", ""},
		{coordv1.Coordinator_Acquire_FullMethodName, &coordv1.AcquireRequest{Name: "QQQQ", Owner: "o", Ttl: pbtime.Dur(5000)}, "name", ""},
		{coordv1.Coordinator_FencedCommit_FullMethodName, &coordv1.FencedCommitRequest{LeaseName: "QQQQ", Generation: 1, Resource: "r"}, "lease_name", ""},
	} {
		err := cc.Invoke(ctx, c.method, withBadByte(t, c.req), new(struct{}), grpc.ForceCodecV2(rawCodec{}))
		md := coorderr.Metadata(err)
		if status.Code(err) != codes.InvalidArgument || coorderr.WireReason(err) != "INVALID_ARGUMENT" || md["field"] != c.field || md["index"] != c.index {
			t.Errorf("%s %v: want INVALID_ARGUMENT on %s (index %q), got %v %v", c.method, c.req, c.field, c.index, err, md)
		}
	}
	// Not protobuf at all: the request.
	err := cc.Invoke(ctx, coordv1.Queue_Submit_FullMethodName, []byte{0x0a, 0xff}, new(struct{}), grpc.ForceCodecV2(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument || coorderr.Metadata(err)["field"] != "request" {
		t.Errorf("garbage: %v %v", err, coorderr.Metadata(err))
	}
	// A stream's message too (KeepAlive), and the server goes on serving.
	st, err := cc.NewStream(ctx, &coordv1.Coordinator_ServiceDesc.Streams[0], coordv1.Coordinator_KeepAlive_FullMethodName, grpc.ForceCodecV2(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SendMsg(withBadByte(t, &coordv1.KeepAliveRequest{Name: "QQQQ", Owner: "o", Generation: 1, Ttl: pbtime.Dur(5000)})); err != nil {
		t.Fatal(err)
	}
	err = st.RecvMsg(new(struct{}))
	if status.Code(err) != codes.InvalidArgument || coorderr.Metadata(err)["field"] != "name" {
		t.Errorf("keepalive: %v %v", err, coorderr.Metadata(err))
	}
	if _, err := coordv1.NewQueueClient(cc).Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Kind: "k"}}}); err != nil {
		t.Fatal(err)
	}
}

// Over HTTP, a body with invalid UTF-8 or a lone surrogate, and a label
// filter with invalid UTF-8 (which a follower could not forward), are 400
// with the reason, never 500.
func TestHTTPUndecodableInputIsBadRequest(t *testing.T) {
	_, s, _ := newQueueTest(t)
	h := s.httpAPI()
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/queue/jobs", "{\"jobs\":[{\"queue\":\"m\xffq\",\"kind\":\"k\"}]}"},
		{"POST", "/v1/queue/jobs", `{"jobs":[{"queue":"q","kind":"k","labels":{"a":"\ud800"}}]}`},
		{"POST", "/v1/schedules", `{"name":"s","schedule":"@daily","time_zone":"\udc00","job":{"kind":"k"}}`},
		{"GET", "/v1/queue/jobs?label=a%3D%ff", ""},
		{"GET", "/v1/schedules/%ff", ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, strings.NewReader(c.body)))
		var out HTTPError
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || rec.Code != http.StatusBadRequest || out.Reason != "INVALID_ARGUMENT" {
			t.Errorf("%s %s %q: %d %s", c.method, c.path, c.body, rec.Code, rec.Body)
		}
	}
}
