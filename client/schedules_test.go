package client

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// oneSchedule serves one schedule with the server's preconditions; before
// the first put with expected_revision it changes the schedule itself
// (someone else's update), once.
type oneSchedule struct {
	coordv1.UnimplementedSchedulesServer
	mu        sync.Mutex
	sc        *coordv1.Schedule
	interfere bool
	puts      int
}

func (s *oneSchedule) GetSchedule(_ context.Context, r *coordv1.GetScheduleRequest) (*coordv1.GetScheduleResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sc == nil || r.GetName() != s.sc.GetSpec().GetName() {
		return nil, coorderr.New(codes.NotFound, coorderr.NotFound, "no schedule", nil)
	}
	return &coordv1.GetScheduleResponse{Schedule: proto.CloneOf(s.sc)}, nil
}

func (s *oneSchedule) PutSchedule(_ context.Context, r *coordv1.PutScheduleRequest) (*coordv1.PutScheduleResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts++
	if s.interfere && r.GetExpectedRevision() != 0 {
		s.interfere = false
		s.sc.Spec.CatchUp = pbtime.Dur(60_000)
		s.sc.Revision++
	}
	meta := map[string]string{"revision": strconv.FormatUint(s.sc.GetRevision(), 10)}
	switch {
	case r.GetCreateOnly() && s.sc != nil && !proto.Equal(s.sc.GetSpec(), r.GetSpec()):
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.ScheduleExists, "exists", meta)
	case r.GetExpectedRevision() != 0 && r.GetExpectedRevision() != s.sc.GetRevision():
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.ScheduleRevisionMismatch, "changed", meta)
	}
	s.sc = &coordv1.Schedule{Spec: proto.CloneOf(r.GetSpec()), Revision: s.sc.GetRevision() + 1}
	return &coordv1.PutScheduleResponse{Schedule: s.sc, Changed: true}, nil
}

// UpdateSchedule changes only what change sets, and after a concurrent
// change (revision mismatch) reads and changes the schedule again, keeping
// both; CreateSchedule of another definition is ErrScheduleExists.
func TestUpdateScheduleRereadsOnConflict(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := &oneSchedule{interfere: true, sc: &coordv1.Schedule{Revision: 3, Spec: &coordv1.ScheduleSpec{Name: "close", Schedule: "5 0 * * *",
		TimeZone: "America/Sao_Paulo", WindowShiftDays: -1, Job: &coordv1.JobTemplate{Kind: "close-day"}}}}
	c := rawClient(t, serveLoopback(t, func(srv *grpc.Server) { coordv1.RegisterSchedulesServer(srv, s) }))

	resp, before, err := c.UpdateSchedule(ctx, "close", func(sp *coordv1.ScheduleSpec) error {
		sp.Schedule = "10 0 * * *"
		return nil
	})
	sp := resp.GetSchedule().GetSpec()
	s.mu.Lock()
	puts := s.puts
	s.mu.Unlock()
	if err != nil || sp.GetSchedule() != "10 0 * * *" || sp.GetTimeZone() != "America/Sao_Paulo" || sp.GetWindowShiftDays() != -1 ||
		sp.GetCatchUpMs() != 60_000 || resp.GetSchedule().GetRevision() != 5 || before.GetCatchUpMs() != 60_000 || puts != 2 {
		t.Fatalf("update: %v (before %v, %d puts): %v", resp, before, puts, err)
	}
	stop := errors.New("stop")
	if _, _, err := c.UpdateSchedule(ctx, "close", func(*coordv1.ScheduleSpec) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("change's error: %v", err)
	}
	if _, _, err := c.UpdateSchedule(ctx, "nope", func(*coordv1.ScheduleSpec) error { return nil }); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	_, err = c.CreateSchedule(ctx, &coordv1.ScheduleSpec{Name: "close", Schedule: "@daily", Job: &coordv1.JobTemplate{Kind: "k"}})
	var ce *Error
	if !errors.Is(err, ErrScheduleExists) || !errors.As(err, &ce) || ce.Metadata["revision"] != "5" {
		t.Fatalf("create over it: %v", err)
	}
}
