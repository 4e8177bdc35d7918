package integration

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Two tenants, each with its own queue.
const tenantACL = `
rules:
  - name: nodes
    identities: [node*]
    node_certificates: true
    ops: [admin]
  - name: reports
    identities: [reports-svc]
    ops: [job, read]
    prefixes: [reports]
  - name: billing
    identities: [billing-svc]
    ops: [job, read]
    prefixes: [billing]
`

// A tenant can neither replace nor pause, trigger or delete another
// tenant's schedule, over gRPC or HTTP, through a follower (the check is
// on the leader), and its refusals (and those of a job asked for by id)
// do not name the other tenant's queue.
func TestCrossTenantScheduleChangesRefused(t *testing.T) {
	c, certs, _ := secureCluster(t, 3, tenantACL, testcluster.WithConfig(func(cfg *testcluster.Config) { cfg.API.HTTPAddr = "127.0.0.1:0" }))
	leader := c.WaitLeader()
	follower := c.Followers()[0]
	ctx := ctxT(t)
	reports := coordv1.NewSchedulesClient(connAs(t, certs.Client("reports-svc"), leader.API.GRPCAddr()))
	billing := coordv1.NewSchedulesClient(connAs(t, certs.Client("billing-svc"), follower.API.GRPCAddr()))
	spec := func(queue string) *coordv1.ScheduleSpec {
		return &coordv1.ScheduleSpec{Name: "reports-hourly", Schedule: "@hourly", Job: &coordv1.JobTemplate{Queue: queue, Kind: "report"}}
	}
	if _, err := reports.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: spec("reports")}); err != nil {
		t.Fatal(err)
	}
	job, err := coordv1.NewQueueClient(connAs(t, certs.Client("reports-svc"), leader.API.GRPCAddr())).Submit(ctx,
		&coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "reports", Kind: "report"}}})
	if err != nil {
		t.Fatal(err)
	}
	quiet := func(what string, msg string, meta map[string]string) {
		t.Helper()
		if strings.Contains(msg, `"reports"`) || meta["name"] != "" {
			t.Fatalf("%s: the refusal names the other tenant's queue: %q %v", what, msg, meta)
		}
	}

	// gRPC, through a follower.
	name := "reports-hourly"
	for what, call := range map[string]func() error{
		"put": func() error {
			_, err := billing.PutSchedule(ctx, &coordv1.PutScheduleRequest{Spec: spec("billing")})
			return err
		},
		"pause": func() error {
			_, err := billing.PauseSchedule(ctx, &coordv1.PauseScheduleRequest{Name: name})
			return err
		},
		"resume": func() error {
			_, err := billing.ResumeSchedule(ctx, &coordv1.ResumeScheduleRequest{Name: name})
			return err
		},
		"trigger": func() error {
			_, err := billing.TriggerSchedule(ctx, &coordv1.TriggerScheduleRequest{Name: name})
			return err
		},
		"delete": func() error {
			_, err := billing.DeleteSchedule(ctx, &coordv1.DeleteScheduleRequest{Name: name})
			return err
		},
		"get job": func() error {
			_, err := coordv1.NewQueueClient(connAs(t, certs.Client("billing-svc"), follower.API.GRPCAddr())).Get(ctx,
				&coordv1.QueueGetRequest{Id: job.GetJobs()[0].GetId()})
			return err
		},
	} {
		err := call()
		wantErr(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
		quiet("gRPC "+what, status.Convert(err).Message(), coorderr.Metadata(err))
	}

	// HTTP, through a follower.
	hc := httpsClient(certs.Client("billing-svc"))
	base := "https://" + follower.API.HTTPAddr()
	for _, call := range []struct{ method, path string }{
		{"POST", "/v1/schedules"},
		{"POST", "/v1/schedules/" + name + "/pause"},
		{"POST", "/v1/schedules/" + name + "/trigger"},
		{"DELETE", "/v1/schedules/" + name},
		{"GET", fmt.Sprintf("/v1/queue/jobs/%d", job.GetJobs()[0].GetId())},
	} {
		var body any
		if call.method == "POST" {
			body = map[string]any{}
			if call.path == "/v1/schedules" {
				body = map[string]any{"name": name, "schedule": "@hourly", "job": map[string]any{"queue": "billing", "kind": "evil"}}
			}
		}
		r := doJSON(t, hc, call.method, base+call.path, body)
		wantHTTP(t, call.method+" "+call.path, r, 403, "PERMISSION_DENIED")
		meta := map[string]string{}
		if m, ok := r.body["metadata"].(map[string]any); ok {
			for k, v := range m {
				meta[k] = fmt.Sprint(v)
			}
		}
		quiet("HTTP "+call.method+" "+call.path, fmt.Sprint(r.body["message"]), meta)
	}

	got, err := reports.GetSchedule(ctx, &coordv1.GetScheduleRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	if sc := got.GetSchedule(); sc.GetRevision() != 1 || sc.GetSpec().GetJob().GetQueue() != "reports" || sc.GetDeleted() ||
		sc.GetPaused() || len(got.GetRecent()) != 0 {
		t.Fatalf("another tenant changed the schedule: %v", got)
	}
}
