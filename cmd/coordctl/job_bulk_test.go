package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// bulkServer counts `matches` jobs for any filter and finishes an
// operation after two progress reads.
type bulkServer struct {
	coordv1.UnimplementedQueueServer
	requestLog
	matches uint64
	mu      sync.Mutex
	reads   int
	started []*coordv1.QueueBulkRequest
}

func (s *bulkServer) Bulk(_ context.Context, req *coordv1.QueueBulkRequest) (*coordv1.QueueBulkResponse, error) {
	s.record(req)
	if req.GetDryRun() {
		return &coordv1.QueueBulkResponse{Count: s.matches}, nil
	}
	s.mu.Lock()
	s.started = append(s.started, req)
	s.mu.Unlock()
	return &coordv1.QueueBulkResponse{Count: s.matches, Op: &coordv1.BulkOp{Id: req.GetRequestId(), Total: s.matches}}, nil
}

func (s *bulkServer) GetBulk(_ context.Context, req *coordv1.QueueGetBulkRequest) (*coordv1.QueueGetBulkResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	o := &coordv1.BulkOp{Id: req.GetId(), Total: s.matches, Done: s.matches / 2, Batches: 1}
	if s.reads >= 2 {
		o.Done, o.Skipped, o.Finished, o.Batches = s.matches-1, 1, true, 2
	}
	return &coordv1.QueueGetBulkResponse{Op: o}, nil
}

func (s *bulkServer) Retry(_ context.Context, req *coordv1.QueueRetryRequest) (*coordv1.QueueRetryResponse, error) {
	s.record(req)
	return &coordv1.QueueRetryResponse{Job: sampleJob()}, nil
}

// TestJobBulkCommands: one id is the one-job call; ids or a filter count
// first (--dry-run stops there); a set over 100 is refused without --yes
// when stdin is not a terminal and asked about on one; the operation is
// followed to its end.
func TestJobBulkCommands(t *testing.T) {
	s := &bulkServer{matches: 250}
	eps := serveScripted(t, func(srv *grpc.Server) { coordv1.RegisterQueueServer(srv, s) })
	bulkPoll = time.Millisecond
	tty, in := false, ""
	stdinTTY = func() bool { return tty }
	t.Cleanup(func() { bulkPoll = 500 * time.Millisecond })

	ctlOK(t, eps, "job", "retry", "17")
	if _, ok := s.last().(*coordv1.QueueRetryRequest); !ok {
		t.Fatalf("one id sent %T", s.last())
	}
	out := ctlOK(t, eps, "job", "retry", "--queue", "billing", "--state", "dead", "--since", "2026-09-25T00:00:00Z", "--dry-run")
	req := s.last().(*coordv1.QueueBulkRequest)
	if !strings.Contains(out, "250 jobs match") || !req.GetDryRun() || req.GetFilter().GetQueue() != "billing" ||
		req.GetFilter().GetState() != coordv1.JobState_JOB_STATE_DEAD || req.GetFilter().GetCreatedAfterMs() != 1_790_294_400_000 || len(s.started) != 0 {
		t.Fatalf("dry run: %q %v", out, req)
	}
	r := ctl(t, eps, "job", "cancel", "--queue", "billing")
	if r.code == exitOK || !strings.Contains(r.errOut, "pass --yes") || len(s.started) != 0 {
		t.Fatalf("over 100 without --yes off a terminal: exit %d %s", r.code, r.errOut)
	}
	tty, in = true, "n\n"
	stdin = strings.NewReader(in)
	if r := ctl(t, eps, "job", "cancel", "--queue", "billing"); r.code == exitOK || !strings.Contains(r.errOut, "cancel 250 jobs? [y/N]") || len(s.started) != 0 {
		t.Fatalf("answered no: exit %d %s", r.code, r.errOut)
	}
	stdin = strings.NewReader("y\n")
	out = ctlOK(t, eps, "job", "cancel", "--queue", "billing")
	if len(s.started) != 1 || s.started[0].GetAction() != coordv1.BulkAction_BULK_ACTION_CANCEL || !strings.HasPrefix(s.started[0].GetRequestId(), "ctl-") ||
		!strings.Contains(out, "cancel: 249 jobs cancelled, 1 skipped") {
		t.Fatalf("confirmed: %q %v", out, s.started)
	}
	tty = false
	s.reads = 0
	out = ctlOK(t, eps, "job", "delete", "3", "4", "5", "--yes")
	if len(s.started) != 2 || len(s.started[1].GetFilter().GetIds()) != 3 || !strings.Contains(out, "249 jobs deleted") {
		t.Fatalf("ids: %q %v", out, s.started[1])
	}
	if r := ctl(t, eps, "job", "retry", "--state", "sleepy"); r.code != exitUsage {
		t.Fatalf("bad state: exit %d %s", r.code, r.errOut)
	}
	if r := ctl(t, eps, "job", "retry", "--since", "yesterday"); r.code != exitUsage || !strings.Contains(r.errOut, "--since") {
		t.Fatalf("bad time: exit %d %s", r.code, r.errOut)
	}
	if r := ctl(t, eps, "job", "retry", "--dry-run"); r.code != exitUsage || !strings.Contains(r.errOut, "name job ids or a filter") {
		t.Fatalf("no filter: exit %d %s", r.code, r.errOut)
	}
}
