package api

import (
	"strings"
	"testing"
)

// Limits over HTTP: set, read back in Limits and Stats, bad input refused
// naming the field, cleared.
func TestQueueLimitsHTTP(t *testing.T) {
	_, s, _ := newQueueTest(t)
	do := jsonDoer(t, s.httpAPI())
	code, out := do("PUT", "/v1/queue/limits/mail", `{"limits":{"concurrency":3,"kind_concurrency":{"send":1},"rate":2.5,"max_run":"90s"}}`)
	lim, _ := out["limits"].(map[string]any)
	if code != 200 || lim["concurrency"] != float64(3) || lim["rate"] != 2.5 || lim["burst"] != float64(3) || lim["max_run"] != "90s" ||
		lim["kind_concurrency"].(map[string]any)["send"] != float64(1) {
		t.Fatalf("%d %v", code, out)
	}
	if code, out = do("GET", "/v1/queue/limits?queue=mail", ""); code != 200 || len(out["limits"].([]any)) != 1 {
		t.Fatalf("%d %v", code, out)
	}
	do("POST", "/v1/queue/jobs", `{"jobs":[{"queue":"mail","kind":"send"}]}`)
	code, out = do("GET", "/v1/queue/stats?queue=mail", "")
	st := out["queues"].([]any)[0].(map[string]any)
	if code != 200 || st["concurrency_limit"] != float64(3) || st["rate_limit"] != 2.5 || st["rate_tokens"] != float64(3) {
		t.Fatalf("%d %v", code, out)
	}
	for body, field := range map[string]string{
		`{"limits":{"rate":-1}}`:                     "rate",
		`{"limits":{"rate":0.0001}}`:                 "rate",
		`{"limits":{"concurrency":2000000}}`:         "concurrency",
		`{"limits":{"kind_concurrency":{"send":0}}}`: "kind_concurrency",
		`{"limits":{"max_run":"-1s"}}`:               "max_run",
		`{"limits":{"max_run":"800000s"}}`:           "max_run",
		`{"limits":{"rate":1,"burst":2000000}}`:      "burst",
	} {
		if code, out = do("PUT", "/v1/queue/limits/mail", body); code != 400 || out["code"] != "INVALID_ARGUMENT" || !strings.Contains(out["message"].(string), field) {
			t.Fatalf("%s: %d %v", body, code, out)
		}
	}
	if code, out = do("PUT", "/v1/queue/limits/mail", `{}`); code != 200 || out["limits"] != nil {
		t.Fatalf("clear: %d %v", code, out)
	}
	if code, out = do("GET", "/v1/queue/limits", ""); code != 200 || len(out["limits"].([]any)) != 0 {
		t.Fatalf("%d %v", code, out)
	}
}
