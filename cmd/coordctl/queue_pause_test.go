package main

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/coordd/coordd/internal/pbtime"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// pauseQueueServer answers Pause, Resume and Stats like a server whose
// queue "billing" is paused by ops.
type pauseQueueServer struct {
	coordv1.UnimplementedQueueServer
	requestLog
	paused bool
}

func (s *pauseQueueServer) Pause(_ context.Context, req *coordv1.QueuePauseRequest) (*coordv1.QueuePauseResponse, error) {
	s.record(req)
	already := s.paused
	s.paused = true
	return &coordv1.QueuePauseResponse{Already: already, Pause: &coordv1.QueuePause{Queue: req.GetQueue(), PausedBy: "ops", PausedAt: pbtime.At(calNow)}}, nil
}

func (s *pauseQueueServer) Resume(_ context.Context, req *coordv1.QueueResumeRequest) (*coordv1.QueueResumeResponse, error) {
	s.record(req)
	was := s.paused
	s.paused = false
	return &coordv1.QueueResumeResponse{WasPaused: was}, nil
}

func (s *pauseQueueServer) Stats(_ context.Context, req *coordv1.QueueStatsRequest) (*coordv1.QueueStatsResponse, error) {
	st := &coordv1.QueueStats{Queue: "billing", Available: 4}
	if s.paused {
		st.Paused, st.PausedBy, st.PausedAt = true, "ops", pbtime.At(calNow)
	}
	return &coordv1.QueueStatsResponse{Queues: []*coordv1.QueueStats{st, {Queue: "default"}}}, nil
}

// TestQueuePauseCommands: pause and resume send the queue, say what
// changed, and stats shows the PAUSED column only while one is paused.
func TestQueuePauseCommands(t *testing.T) {
	s := &pauseQueueServer{}
	eps := serveScripted(t, func(srv *grpc.Server) { coordv1.RegisterQueueServer(srv, s) })
	if out := ctlOK(t, eps, "queue", "stats"); strings.Contains(out, "PAUSED") {
		t.Fatalf("a PAUSED column without a paused queue:\n%s", out)
	}
	out := ctlOK(t, eps, "queue", "pause", "billing")
	if !strings.Contains(out, "queue billing paused by ops at 2026-09-25T10:00:00.000Z") || s.last().(*coordv1.QueuePauseRequest).GetQueue() != "billing" {
		t.Fatalf("pause: %s", out)
	}
	if out := ctlOK(t, eps, "queue", "pause", "billing"); !strings.Contains(out, "unchanged: queue billing was already paused by ops") {
		t.Fatalf("second pause: %s", out)
	}
	out = ctlOK(t, eps, "queue", "stats")
	if !strings.Contains(out, "PAUSED") || !strings.Contains(out, "by ops since 2026-09-25T10:00:00.000Z") {
		t.Fatalf("stats while paused:\n%s", out)
	}
	if out := ctlOK(t, eps, "queue", "resume", "billing"); out != "queue billing resumed\n" {
		t.Fatalf("resume: %q", out)
	}
	if out := ctlOK(t, eps, "queue", "resume", "billing"); !strings.Contains(out, "unchanged: queue billing was not paused") {
		t.Fatalf("second resume: %q", out)
	}
	if r := ctl(t, eps, "queue", "pause"); r.code == exitOK || !strings.Contains(r.errOut, "arg") {
		t.Fatalf("pause without a queue: exit %d %s", r.code, r.errOut)
	}
}
