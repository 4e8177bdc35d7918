package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// create_only and expected_revision reach the FSM: a create of an existing
// name with another spec and an update of a revision that moved are
// FAILED_PRECONDITION with their reasons and the current revision; over
// HTTP they are query parameters, refused with 409.
func TestPutSchedulePreconditions(t *testing.T) {
	_, s, h := newSchedulesTest(t)
	ctx := context.Background()
	put := func(spec *coordv1.ScheduleSpec, createOnly bool, rev uint64) (*coordv1.PutScheduleResponse, error) {
		return h.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: spec, CreateOnly: createOnly, ExpectedRevision: rev})
	}
	if r, err := put(everyMinute("close"), true, 0); err != nil || !r.GetCreated() {
		t.Fatalf("create: %v %v", r, err)
	}
	other := everyMinute("close")
	other.TimeZone = "America/Sao_Paulo"
	_, err := put(other, true, 0)
	if status.Code(err) != codes.FailedPrecondition || reason(err) != "SCHEDULE_EXISTS" || coorderr.Metadata(err)["revision"] != "1" {
		t.Fatalf("create over an existing one: %v", err)
	}
	_, err = put(other, false, 7)
	if status.Code(err) != codes.FailedPrecondition || reason(err) != "SCHEDULE_REVISION_MISMATCH" || coorderr.Metadata(err)["revision"] != "1" {
		t.Fatalf("stale revision: %v", err)
	}
	if r, err := put(other, false, 1); err != nil || !r.GetChanged() || r.GetSchedule().GetRevision() != 2 {
		t.Fatalf("update at revision 1: %v %v", r, err)
	}

	rec := httptest.NewRecorder()
	s.httpAPI().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/schedules?create_only=true",
		strings.NewReader(`{"name":"close","schedule":"@daily","job":{"kind":"k"}}`)))
	var body struct {
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || rec.Code != http.StatusConflict || body.Reason != "SCHEDULE_EXISTS" {
		t.Fatalf("HTTP create_only: %d %s", rec.Code, rec.Body)
	}
}
