package api

import (
	"bytes"
	"testing"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// A body that is one field of the request (PutSchedule's body: "spec", which
// the gateway decodes into &req.Spec) takes the API's JSON too: the
// template's args as a JSON value, durations as "90s", enums by short name.
func TestHTTPJSONBodyField(t *testing.T) {
	var req coordv1.PutScheduleRequest
	body := `{"name":"s","schedule":"5 0 * * *","overlap":"forbid",` +
		`"job":{"queue":"q","kind":"k","args":{"a":1},"visibility_timeout":"90s"}}`
	if err := newHTTPJSON().NewDecoder(bytes.NewBufferString(body)).Decode(&req.Spec); err != nil {
		t.Fatalf("decode: %v", err)
	}
	spec := req.GetSpec()
	if got := string(spec.GetJob().GetArgs()); got != `{"a":1}` {
		t.Errorf("args = %q, want {\"a\":1}", got)
	}
	if spec.GetOverlap() != coordv1.ScheduleOverlap_SCHEDULE_OVERLAP_FORBID || spec.GetJob().GetVisibilityTimeout().AsDuration().Seconds() != 90 {
		t.Errorf("spec = %v", spec)
	}
}
