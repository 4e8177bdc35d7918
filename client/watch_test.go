package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// logNode serves Watch from a fixed log: entry i (1..last) holds one lease
// event "k/i". It holds entries from oldest on, and ends every stream with
// UNAVAILABLE after breakAfter events (0: never).
type logNode struct {
	coordv1.UnimplementedWatchServer
	mu         sync.Mutex
	oldest     uint64
	last       uint64
	breakAfter int
	starts     []uint64 // the start index of each stream
	req        *coordv1.WatchRequest
}

func (n *logNode) Watch(req *coordv1.WatchRequest, s coordv1.Watch_WatchServer) error {
	n.mu.Lock()
	from, oldest, last, brk := req.GetStartIndex(), n.oldest, n.last, n.breakAfter
	if from == 0 {
		from = last + 1
	}
	n.starts = append(n.starts, from)
	n.req = req
	n.mu.Unlock()
	if from < oldest {
		return coorderr.New(codes.FailedPrecondition, coorderr.WatchIndexCompacted, "compacted",
			map[string]string{"oldest_index": strconv.FormatUint(oldest, 10)})
	}
	if err := s.Send(&coordv1.WatchResponse{ResumeIndex: from, Synced: true}); err != nil {
		return err
	}
	sent := 0
	for i := from; i <= last; i++ {
		e := &coordv1.WatchEvent{Index: i, Family: coordv1.WatchFamily_WATCH_FAMILY_LEASE, Kind: coordv1.WatchEventKind_WATCH_EVENT_KIND_PUT,
			Key: fmt.Sprintf("k/%d", i), Record: &coordv1.WatchEvent_Lease{Lease: &coordv1.Lease{Name: fmt.Sprintf("k/%d", i)}}}
		if err := s.Send(&coordv1.WatchResponse{Events: []*coordv1.WatchEvent{e}, ResumeIndex: i + 1, Synced: true}); err != nil {
			return err
		}
		if sent++; sent == brk {
			return coorderr.New(codes.Unavailable, coorderr.ShuttingDown, "going away", nil)
		}
	}
	<-s.Context().Done()
	return nil
}

func (n *logNode) streamStarts() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]uint64(nil), n.starts...)
}

func startLogNode(t *testing.T, n *logNode) string {
	t.Helper()
	return serveLoopback(t, func(srv *grpc.Server) { coordv1.RegisterWatchServer(srv, n) })
}

func collect(t *testing.T, w *Watcher, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for len(got) < n {
		select {
		case resp, ok := <-w.Responses():
			if !ok {
				t.Fatalf("watch ended after %v: %v", got, w.Err())
			}
			for _, e := range resp.Events {
				got = append(got, e.GetKey())
			}
		case <-timeout:
			t.Fatalf("got %v", got)
		}
	}
	return got
}

// The stream breaks every 3 events; the watch resumes, on the other node,
// right after the last event it delivered.
func TestWatchResumesAcrossNodes(t *testing.T) {
	a := &logNode{oldest: 1, last: 10, breakAfter: 3}
	b := &logNode{oldest: 1, last: 10, breakAfter: 3}
	c := rawClient(t, startLogNode(t, a), startLogNode(t, b))
	ctx, cancel := context.WithCancel(context.Background())
	w := c.Watch(ctx, "k/", 1)
	got := collect(t, w, 10)
	var want []string
	for i := 1; i <= 10; i++ {
		want = append(want, fmt.Sprintf("k/%d", i))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events %v, want each once in order", got)
	}
	if starts := append(a.streamStarts(), b.streamStarts()...); fmt.Sprint(starts) != "[1 7 4 10]" {
		t.Fatalf("streams started at %v", starts)
	}
	cancel()
	for range w.Responses() {
	}
	if !errors.Is(w.Err(), context.Canceled) {
		t.Fatalf("end: %v", w.Err())
	}
}

// WatchOnFollower starts away from the believed leader (of three nodes,
// one of the other two, each chosen sometimes); WatchJobs sends the job
// filter.
func TestWatchOnFollowerWithJobFilter(t *testing.T) {
	nodes := []*logNode{{oldest: 1, last: 1}, {oldest: 1, last: 1}, {oldest: 1, last: 1}}
	c := rawClient(t, startLogNode(t, nodes[0]), startLogNode(t, nodes[1]), startLogNode(t, nodes[2]))
	leader := c.leaderEndpoint()
	seen := map[string]bool{}
	for i := 0; i < 50 && len(seen) < 2; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		w := c.Watch(ctx, "q/", 0, WatchOnFollower(), WatchJobs("w1", coordv1.JobState_JOB_STATE_CANCELLED))
		<-w.Responses()
		if ep := w.Endpoint(); ep == leader {
			t.Fatalf("watch %d started on the leader %s", i, ep)
		}
		seen[w.Endpoint()] = true
		cancel()
		for range w.Responses() {
		}
	}
	if len(seen) != 2 {
		t.Fatalf("started on %v only", seen)
	}
	for i, n := range nodes {
		n.mu.Lock()
		req := n.req
		n.mu.Unlock()
		if c.endpoints[i] == leader {
			continue
		}
		if req.GetJobWorkerId() != "w1" || fmt.Sprint(req.GetJobStates()) != "[JOB_STATE_CANCELLED]" {
			t.Fatalf("request %v", req)
		}
	}
}

// A node whose ring starts later sends the watch to another; when none
// holds the index, the watch ends with ErrWatchCompacted and the oldest
// index.
func TestWatchCompacted(t *testing.T) {
	late := &logNode{oldest: 6, last: 10}
	full := &logNode{oldest: 1, last: 10}
	c := rawClient(t, startLogNode(t, late), startLogNode(t, full))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := c.Watch(ctx, "k/", 2)
	if got := collect(t, w, 9); got[0] != "k/2" || w.Endpoint() != c.endpoints[1] {
		t.Fatalf("got %v from %s", got, w.Endpoint())
	}

	c2 := rawClient(t, startLogNode(t, &logNode{oldest: 6, last: 10}), startLogNode(t, &logNode{oldest: 5, last: 10}))
	w2 := c2.Watch(ctx, "k/", 2)
	for range w2.Responses() {
	}
	if !errors.Is(w2.Err(), ErrWatchCompacted) || OldestIndex(w2.Err()) != 5 {
		t.Fatalf("end: %v (oldest %d)", w2.Err(), OldestIndex(w2.Err()))
	}
}

// The first response says where a watch from now starts, even without
// events.
func TestWatchFromNowSaysWhere(t *testing.T) {
	n := &logNode{oldest: 1, last: 10}
	c := testClient(t, []string{startLogNode(t, n)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := c.Watch(ctx, "", 0)
	select {
	case r := <-w.Responses():
		if r.ResumeIndex != 11 || len(r.Events) != 0 || !r.Synced {
			t.Fatalf("first response %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no first response")
	}
}
