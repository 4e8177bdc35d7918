package integration

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/delivery"
	"github.com/coordd/coordd/internal/testcluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/webhook"
)

// An endpoint written in Node (test/delivery-endpoint/server.mjs, the
// Standard Webhooks reference library from npm, which scripts/test.sh
// installs) receives an immediate, a delayed and a scheduled job: it
// verifies every signature with that library and makes each effect with
// FencedCommit over HTTP; every job succeeds with the endpoint's answer.
// Without node and npm it skips, except in CI (CI set), where it fails.
func TestDeliveryToANodeEndpoint(t *testing.T) {
	t.Parallel() // its own cluster, mostly waiting (see TestMain)
	src := nodePackages(t, "../test/delivery-endpoint", "the Node endpoint test")
	secret := webhook.NewSecret()
	allow, err := delivery.ParseAllow([]string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	c := testcluster.New(t, 1, testcluster.WithConfig(func(cfg *testcluster.Config) {
		cfg.API.HTTPAddr = "127.0.0.1:0"
		cfg.API.Delivery = delivery.Options{Allow: allow, Secrets: delivery.Secrets{"node": {secret}}}
	}))
	leader := c.WaitLeader()
	ep := exec.Command("node", "server.mjs")
	ep.Dir = src
	ep.Env = append(os.Environ(), "COORDD_HTTP=http://"+leader.API.HTTPAddr(), "COORDD_SECRET="+secret.String())
	ep.Stderr = os.Stderr
	ep.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := ep.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := ep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ep.Process.Signal(syscall.SIGTERM)
		_ = ep.Wait()
	})
	type line struct {
		Listening   string `json:"listening"`
		Job         string `json:"job"`
		Attempt     string `json:"attempt"`
		Token       string `json:"token"`
		Window      string `json:"window"`
		Occurrence  string `json:"occurrence"`
		Deadline    string `json:"deadline"`
		Idempotency string `json:"idempotency"`
		WebhookID   string `json:"webhook_id"`
		Verified    bool   `json:"verified"`
		Accepted    bool   `json:"accepted"`
		Error       string `json:"error"`
	}
	lines := make(chan line, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var l line
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				lines <- l
			}
		}
		close(lines)
	}()
	next := func() line {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the Node endpoint exited")
			}
			return l
		case <-time.After(20 * time.Second):
			t.Fatal("no line from the Node endpoint within 20 s")
		}
		return line{}
	}
	url := next().Listening
	if url == "" {
		t.Fatal("the Node endpoint did not say where it listens")
	}
	target := &coordv1.HttpTarget{Url: url + "/jobs", Secret: "node"}
	q := queueOf(c, leader)
	sub := submitJobs(t, q, &coordv1.NewJob{Queue: "hooks", Kind: "now", Args: []byte(`{"n":1}`), Target: target, UniqueKey: "node-now"},
		&coordv1.NewJob{Queue: "hooks", Kind: "later", Args: []byte(`{"n":2}`), Delay: durationpb.New(500 * time.Millisecond), Target: target})
	sc := coordv1.NewSchedulesClient(c.Conn(leader))
	if _, err := sc.PutSchedule(ctxT(t), &coordv1.PutScheduleRequest{Spec: &coordv1.ScheduleSpec{Name: "node-nightly", Schedule: "0 3 * * *",
		Job: &coordv1.JobTemplate{Queue: "hooks", Kind: "scheduled", Args: []byte(`{"n":3}`), Target: target}}}); err != nil {
		t.Fatal(err)
	}
	tr, err := sc.TriggerSchedule(ctxT(t), &coordv1.TriggerScheduleRequest{Name: "node-nightly"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []uint64{sub[0].GetId(), sub[1].GetId(), tr.GetOccurrence().GetJobId()}
	seen := map[string]line{}
	for len(seen) < 3 {
		l := next()
		if !l.Verified || !l.Accepted {
			t.Fatalf("the Node endpoint: %+v", l)
		}
		seen[l.Job] = l
	}
	// Each request's headers, as the endpoint saw them: the attempt's
	// token, the idempotency key (the unique key, else one from the id),
	// the webhook id, a deadline, and a schedule's window and occurrence.
	occ := tr.GetOccurrence()
	for i, id := range ids {
		l, sid := seen[strconv.FormatUint(id, 10)], strconv.FormatUint(id, 10)
		key, window, occurrence := "coordd-job-"+sid, "", ""
		switch i {
		case 0:
			key = "node-now"
		case 2:
			key, window, occurrence = getJob(t, q, id).GetUniqueKey(), occ.GetWindow(), occ.GetAt().AsTime().Format(time.RFC3339Nano)
		}
		if l.Attempt != "1" || l.Token != "job:"+sid+":1" || l.Idempotency != key || l.WebhookID != "job_"+sid || l.Window != window {
			t.Errorf("job %s: headers %+v, want attempt 1, token job:%s:1, key %q, webhook id job_%s, window %q", sid, l, sid, key, sid, window)
		}
		if at, err := time.Parse(time.RFC3339Nano, l.Occurrence); (occurrence == "") != (l.Occurrence == "") ||
			occurrence != "" && (err != nil || !at.Equal(occ.GetAt().AsTime())) {
			t.Errorf("job %s: %s %q, want %q", sid, delivery.HeaderOccurrence, l.Occurrence, occurrence)
		}
		if _, err := time.Parse(time.RFC3339Nano, l.Deadline); err != nil {
			t.Errorf("job %s: %s %q: %v", sid, delivery.HeaderDeadline, l.Deadline, err)
		}
	}
	for _, id := range ids {
		c.Eventually("job "+strconv.FormatUint(id, 10)+" succeeded", 10*time.Second, func() bool {
			j := getJob(t, q, id)
			return j.GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED && string(j.GetAttemptLog()[0].GetResult()) == `{"node":"ok","duplicate":false}`
		})
		a := getJob(t, q, id).GetAttemptLog()[0]
		if a.GetDeliveryStatus() != 200 || a.GetDeliveryLatency() == nil {
			t.Errorf("job %d's attempt: delivery status %d, latency %v; want 200 and a latency", id, a.GetDeliveryStatus(), a.GetDeliveryLatency())
		}
	}
	// The delayed job was delivered no earlier than its delay.
	if j := getJob(t, q, ids[1]); j.GetAttemptLog()[0].GetStartedAtMs()-j.GetCreatedAtMs() < 500 {
		t.Errorf("the delayed job was delivered %d ms after it was submitted, before its 500 ms delay", j.GetAttemptLog()[0].GetStartedAtMs()-j.GetCreatedAtMs())
	}
}
