package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A schedule put over HTTP takes its job template's args as a JSON value,
// as every other body does, and answers them as one. (Its body is the spec
// alone: the gateway decodes it into the request's spec field, a pointer
// to a message rather than a message.)
func TestHTTPSchedulePutTakesJSONArgs(t *testing.T) {
	_, s, _ := newQueueTest(t)
	h := s.httpAPI()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/schedules",
		strings.NewReader(`{"name":"s","schedule":"@daily","overlap":"forbid","job":{"queue":"q","kind":"k","args":{"a":1}}}`)))
	if rec.Code != http.StatusOK {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	var out struct {
		Schedule struct {
			Spec struct {
				Overlap string
				Job     struct{ Args json.RawMessage }
			}
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if got := string(out.Schedule.Spec.Job.Args); got != `{"a":1}` || out.Schedule.Spec.Overlap != "FORBID" {
		t.Errorf("answered args %s, overlap %q; want {\"a\":1}, FORBID: %s", got, out.Schedule.Spec.Overlap, rec.Body)
	}
}
