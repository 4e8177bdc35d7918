package api

import (
	"context"
	"strings"
	"testing"

	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// A schedule put without an identity (no authorization) reads "Created at
// …" on its page, not "Created by  at …"; with one, "Created by ops at".
func TestConsoleScheduleCreatedWithoutIdentity(t *testing.T) {
	ct := newConsoleTest(t, false)
	if _, err := ct.sh.PutSchedule(context.Background(), &coordv1.PutScheduleRequest{Spec: everyMinute("anon")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ct.sh.PutSchedule(caller("ops"), &coordv1.PutScheduleRequest{Spec: everyMinute("named")}); err != nil {
		t.Fatal(err)
	}
	if body := ct.get("", "/ui/schedules/anon", 200); !strings.Contains(body, "Created at ") || strings.Contains(body, "Created by") {
		t.Errorf("anon: %s", body[strings.Index(body, "Times in UTC"):])
	}
	if body := ct.get("", "/ui/schedules/named", 200); !strings.Contains(body, "Created by ops at ") {
		t.Errorf("named: %s", body[strings.Index(body, "Times in UTC"):])
	}
}
