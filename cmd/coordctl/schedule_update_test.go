package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// storedSchedules is a coord.v1.Schedules on loopback that keeps what is
// put, with the server's preconditions (create_only, expected_revision),
// and answers GetSchedule with daily occurrences at 00:05 in the
// schedule's zone from 2026-09-26.
type storedSchedules struct {
	coordv1.UnimplementedSchedulesServer
	mu     sync.Mutex
	byName map[string]*coordv1.Schedule
	puts   []*coordv1.PutScheduleRequest
	// interfere: the next put with expected_revision finds the schedule
	// changed by someone else first (its priority set to 9).
	interfere bool
}

func (s *storedSchedules) PutSchedule(_ context.Context, r *coordv1.PutScheduleRequest) (*coordv1.PutScheduleResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.puts = append(s.puts, proto.CloneOf(r))
	name := r.GetSpec().GetName()
	cur := s.byName[name]
	if r.GetExpectedRevision() != 0 && s.interfere && cur != nil {
		s.interfere = false
		cur.Spec.Job.Priority = 9
		cur.Revision++
	}
	meta := map[string]string{"schedule": name, "revision": strconv.FormatUint(cur.GetRevision(), 10)}
	switch {
	case cur != nil && proto.Equal(cur.GetSpec(), r.GetSpec()) && !cur.GetDeleted():
		return &coordv1.PutScheduleResponse{Schedule: cur}, nil
	case r.GetCreateOnly() && cur != nil:
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.ScheduleExists, `schedule "`+name+`" exists with another definition`, meta)
	case r.GetExpectedRevision() != 0 && cur == nil:
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.ScheduleNotFound, `schedule "`+name+`" does not exist`, nil)
	case r.GetExpectedRevision() != 0 && cur.GetRevision() != r.GetExpectedRevision():
		return nil, coorderr.New(codes.FailedPrecondition, coorderr.ScheduleRevisionMismatch, `schedule "`+name+`" changed`, meta)
	}
	spec := proto.CloneOf(r.GetSpec())
	if spec.Overlap == coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_UNSPECIFIED {
		spec.Overlap = coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID // the server fills in defaults
	}
	n := &coordv1.Schedule{Spec: spec, Revision: cur.GetRevision() + 1, CreatedAt: pbtime.At(calNow), UpdatedAt: pbtime.At(calNow),
		Interval: pbtime.Dur(86_400_000)}
	s.byName[name] = n
	return &coordv1.PutScheduleResponse{Schedule: n, Created: cur == nil, Changed: true}, nil
}

func (s *storedSchedules) GetSchedule(_ context.Context, r *coordv1.GetScheduleRequest) (*coordv1.GetScheduleResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sc := s.byName[r.GetName()]
	if sc == nil {
		return nil, coorderr.New(codes.NotFound, coorderr.NotFound, "schedule "+r.GetName()+" not found", nil)
	}
	resp := &coordv1.GetScheduleResponse{Schedule: proto.CloneOf(sc), CalendarTime: pbtime.At(calNow)}
	for i := range int(r.GetNext()) {
		at := time.Date(2026, 9, 26+i, 0, 5, 0, 0, zoneOf(sc))
		resp.Next = append(resp.Next, &coordv1.ScheduleOccurrence{At: pbtime.FromTime(at), Window: at.Format("2006-01-02")})
	}
	return resp, nil
}

func startStoredSchedules(t *testing.T) (*storedSchedules, []string) {
	t.Helper()
	s := &storedSchedules{byName: map[string]*coordv1.Schedule{}}
	return s, serveScripted(t, func(srv *grpc.Server) { coordv1.RegisterSchedulesServer(srv, s) })
}

func (s *storedSchedules) spec(name string) *coordv1.ScheduleSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	return proto.CloneOf(s.byName[name].GetSpec())
}

// The story: a create over an existing name is refused and names
// the commands that change it; update changes only the fields named (also
// when someone changed the schedule in between: it reads it again), apply
// replaces the whole definition from a file; each prints what changed and
// the next occurrences.
func TestScheduleCreateUpdateApply(t *testing.T) {
	s, eps := startStoredSchedules(t)
	create := []string{"schedule", "create", "daily-close", "--schedule", "5 0 * * *", "--tz", "America/Sao_Paulo",
		"--window-shift-days", "-1", "--queue", "billing", "--kind", "close-day", "--complete-within", "2h"}
	file := filepath.Join("testdata", "daily-close.yaml")
	goldenTranscript(t, "schedule_change", eps, [][]string{
		create,
		create, // the same again: unchanged
		{"schedule", "update", "daily-close", "--schedule", "10 0 * * *", "--label", "team=finance"},
		{"schedule", "apply", "-f", file},
	})
	sp := s.spec("daily-close")
	if sp.GetSchedule() != "5 0 * * *" || sp.GetTimeZone() != "America/Sao_Paulo" || sp.GetCompleteWithinMs() != 10_800_000 ||
		len(sp.GetJob().GetLabels()) != 0 {
		t.Fatalf("after apply: %v", sp)
	}

	// A create of the name with another definition is refused, changing
	// nothing, and says how to change it.
	r := ctl(t, eps, "schedule", "create", "daily-close", "--schedule", "5 0 * * *", "--kind", "close-day")
	if r.code != exitError || !strings.Contains(r.errOut, "SCHEDULE_EXISTS") ||
		!strings.Contains(r.errOut, "'coordctl schedule update daily-close --FLAG VALUE …'") ||
		!strings.Contains(r.errOut, "'coordctl schedule apply -f FILE'") {
		t.Fatalf("exit %d: %q", r.code, r.errOut)
	}
	if !proto.Equal(s.spec("daily-close"), sp) {
		t.Fatalf("a refused create changed the schedule: %v", s.spec("daily-close"))
	}

	// An update that meets a concurrent change reads the schedule again
	// and keeps both changes.
	s.mu.Lock()
	s.interfere = true
	s.mu.Unlock()
	ctlOK(t, eps, "schedule", "update", "daily-close", "--tz", "Europe/Berlin")
	if sp := s.spec("daily-close"); sp.GetTimeZone() != "Europe/Berlin" || sp.GetJob().GetPriority() != 9 || sp.GetWindowShiftDays() != -1 ||
		sp.GetCompleteWithinMs() != 10_800_000 {
		t.Fatalf("after a conflicting update: %v", sp)
	}
	s.mu.Lock()
	last := s.puts[len(s.puts)-1]
	s.mu.Unlock()
	if last.GetExpectedRevision() != 4 || last.GetCreateOnly() {
		t.Fatalf("the update's put %v: want expected_revision 4 (read again after the change to 4)", last)
	}

	// update of a missing schedule, and without a field, and apply of a
	// file without a name.
	if r := ctl(t, eps, "schedule", "update", "nope", "--tz", "UTC"); r.code != exitError ||
		!strings.Contains(r.errOut, "create it with 'coordctl schedule create nope …'") {
		t.Fatalf("exit %d: %q", r.code, r.errOut)
	}
	if r := ctl(t, eps, "schedule", "update", "daily-close"); r.code != exitUsage {
		t.Fatalf("update without fields: exit %d: %q", r.code, r.errOut)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	_ = os.WriteFile(bad, []byte("schedule: \"@daily\"\n"), 0o600)
	if r := ctl(t, eps, "schedule", "apply", "-f", bad); r.code != exitError || !strings.Contains(r.errOut, "the spec has no name") {
		t.Fatalf("apply without name: exit %d: %q", r.code, r.errOut)
	}
}
