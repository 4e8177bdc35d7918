package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/auth"
	"github.com/coordd/coordd/node"
	fsmv1 "github.com/coordd/coordd/proto/coord/fsm/v1"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Acquire hands the node one command with the caller's identity and the
// live-lease limit; the node decides the rest (the API repeats no FSM
// decision: a held lease is whatever the node answers).
func TestAcquireBuildsTheCommand(t *testing.T) {
	n := newFakeNode()
	s := newTestServer(t, n)
	s.cfg.Limits.LeasesPerIdentity = 3
	ctx := auth.WithCaller(context.Background(), auth.Caller{Identity: "billing"})
	c := &coordinator{s: s}
	req := &coordv1.AcquireRequest{Name: "L", Owner: "o", Ttl: pbtime.Dur(5000), RequestId: "r1",
		Claim: &coordv1.WindowRef{Job: "j", Window: "w", NotBefore: pbtime.At(5)}}
	resp, err := c.Acquire(ctx, req)
	if err != nil || !resp.GetAcquired() || !resp.GetClaim().GetClaimed() {
		t.Fatalf("%v %v", resp, err)
	}
	got := n.acquires[0]
	want := &fsmv1.Acquire{Name: "L", Owner: "o", TtlMs: 5000, RequestId: "r1", Identity: "billing", MaxLiveLeases: 3,
		ClaimJob: "j", ClaimWindow: "w", ClaimNotBeforeMs: 5}
	if got.String() != want.String() {
		t.Fatalf("command %v, want %v", got, want)
	}
	// Held by someone else: the node's answer, passed on.
	resp, err = c.Acquire(ctx, &coordv1.AcquireRequest{Name: "L", Owner: "p", Ttl: pbtime.Dur(5000)})
	if err != nil || resp.GetAcquired() || resp.GetLease().GetOwner() != "o" {
		t.Fatalf("held: %v %v", resp, err)
	}
	// Bad input never reaches the node.
	before := len(n.acquires)
	for _, bad := range []*coordv1.AcquireRequest{
		{Name: "", Owner: "o", Ttl: pbtime.Dur(5000)},
		{Name: "L", Owner: "o", Ttl: pbtime.Dur(10)},
		{Name: "L", Owner: "o", Ttl: pbtime.Dur(5000), Claim: &coordv1.WindowRef{Job: "j"}},
		{Name: strings.Repeat("x", MaxNameBytes+1), Owner: "o", Ttl: pbtime.Dur(5000)},
	} {
		if _, err := c.Acquire(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v", bad, err)
		}
	}
	if len(n.acquires) != before {
		t.Fatal("bad input reached the node")
	}
}

// Waiting acquires count against the identity's limit while they wait.
func TestWaitingAcquireLimit(t *testing.T) {
	n := newFakeNode()
	n.block = make(chan struct{})
	s := newTestServer(t, n)
	s.limits = auth.NewLimiter(auth.Limits{WaitingAcquires: 1})
	ctx := auth.WithCaller(context.Background(), auth.Caller{Identity: "d"})
	c := &coordinator{s: s}
	first := make(chan error, 1)
	go func() {
		_, err := c.Acquire(ctx, &coordv1.AcquireRequest{Name: "a", Owner: "d", Ttl: pbtime.Dur(5000), Wait: true})
		first <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n.mu.Lock()
		w := n.waits
		n.mu.Unlock()
		if w == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first wait did not reach the node")
		}
		time.Sleep(time.Millisecond)
	}
	_, err := c.Acquire(ctx, &coordv1.AcquireRequest{Name: "b", Owner: "d", Ttl: pbtime.Dur(5000), Wait: true})
	if status.Code(err) != codes.ResourceExhausted || coorderr.WireReason(err) != "WAIT_LIMIT" {
		t.Fatalf("second wait: %v", err)
	}
	// Another identity is not limited by d's waits; a call without wait is not a wait.
	if _, err := c.Acquire(ctx, &coordv1.AcquireRequest{Name: "c", Owner: "d", Ttl: pbtime.Dur(5000)}); err != nil {
		t.Fatalf("no wait: %v", err)
	}
	close(n.block)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, &coordv1.AcquireRequest{Name: "b", Owner: "d", Ttl: pbtime.Dur(5000), Wait: true}); err != nil {
		t.Fatalf("a wait after the first ended: %v", err)
	}
}

// TransferLeadership on a single-node cluster: FAILED_PRECONDITION saying
// why, not an Internal "cannot find peer".
func TestTransferLeadershipSingleNode(t *testing.T) {
	n := newFakeNode()
	n.transfer = &node.PreconditionError{Msg: "single-node cluster: no other voter to transfer leadership to"}
	s := newTestServer(t, n)
	_, err := (&cluster{s: s}).TransferLeadership(context.Background(), &coordv1.TransferLeadershipRequest{})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "single-node cluster") {
		t.Fatalf("%v", err)
	}
}

// Reads answer NOT_FOUND for what does not exist, and page tokens are
// checked.
func TestReads(t *testing.T) {
	n := newFakeNode()
	s := newTestServer(t, n)
	c := &coordinator{s: s}
	if _, err := c.GetLease(context.Background(), &coordv1.GetLeaseRequest{Name: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("missing lease: %v", err)
	}
	for i := 0; i < 3; i++ {
		n.apply(&fsmv1.Acquire{Name: "p/" + string(rune('a'+i)), Owner: "o", TtlMs: 5000})
	}
	page, err := c.ListLeases(context.Background(), &coordv1.ListLeasesRequest{Prefix: "p/", PageSize: 2})
	if err != nil || len(page.GetLeases()) != 2 || page.GetNextPageToken() == "" {
		t.Fatalf("%v %v", page, err)
	}
	rest, err := c.ListLeases(context.Background(), &coordv1.ListLeasesRequest{Prefix: "p/", PageSize: 2, PageToken: page.GetNextPageToken()})
	if err != nil || len(rest.GetLeases()) != 1 || rest.GetLeases()[0].GetName() != "p/c" {
		t.Fatalf("%v %v", rest, err)
	}
	if _, err := c.ListLeases(context.Background(), &coordv1.ListLeasesRequest{PageToken: "%%%"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("bad token: %v", err)
	}
}
