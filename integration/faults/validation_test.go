//go:build faults

package faults

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/pbtime"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/coordd/coordd/coorderr"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
)

// Issue 23: no answer that depends on a node's own, possibly stale view
// calls valid input invalid. A follower that has just restarted has
// applied nothing yet (its calendar is 0); delayed jobs submitted through
// it at once, near (now + 5 s) and far (now + 300 days), are all accepted
// (a refusal as INVALID_ARGUMENT would make a client drop the job); one
// beyond 366 days is still refused, by the leader's FSM at its calendar
// stamp.
func TestRestartedFollowerAcceptsDelayedJobs(t *testing.T) {
	r := newRun(t)
	leader := r.c.WaitLeader()
	var f = r.c.Nodes[0]
	for _, nd := range r.c.Nodes {
		if nd != leader {
			f = nd
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Something in the log before the restart (the follower replays it
	// only once the leader tells it the commit index).
	if _, err := coordv1.NewQueueClient(leader.Conn).Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "v", Kind: "warm"}}}); err != nil {
		t.Fatal(err)
	}
	r.c.WaitCaughtUp(f, 10*time.Second)

	r.c.Kill(f)
	// A fresh connection that retries every few ms (the harness's would
	// back off for a second after the kill, past the window).
	conn, err := grpc.NewClient(f.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1,
			MaxDelay: 5 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.Connect()
	r.c.Restart(f)
	restarted := time.Now()
	qc := coordv1.NewQueueClient(conn)

	// The follower's own view as it first answers (evidence of the
	// window: calendar 0 before it applied an entry).
	first := make(chan *coordv1.StatusResponse, 1)
	go func() {
		st, err := coordv1.NewClusterClient(conn).Status(ctx, &coordv1.StatusRequest{}, grpc.WaitForReady(true))
		if err == nil {
			first <- st
		}
		close(first)
	}()

	const day = 24 * 3600 * 1000
	now := time.Now().UnixMilli()
	type outcome struct {
		key      string
		runAt    int64
		answers  []string // each answer until accepted
		accepted bool
		refused  error
	}
	var outs []*outcome
	for i := range 10 {
		outs = append(outs, &outcome{key: fmt.Sprintf("near-%d", i), runAt: now + 5000},
			&outcome{key: fmt.Sprintf("far-%d", i), runAt: now + 300*day})
	}
	var wg sync.WaitGroup
	for _, o := range outs {
		wg.Go(func() {
			// Retried while the follower knows no leader yet (UNAVAILABLE)
			// or the call times out; the unique key makes a retry return
			// the first job. A refusal as bad input ends it.
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
				_, err := qc.Submit(cctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "v", Kind: "delayed",
					UniqueKey: o.key, RunAt: pbtime.At(o.runAt)}}}, grpc.WaitForReady(true))
				ccancel()
				o.answers = append(o.answers, status.Code(err).String())
				switch status.Code(err) {
				case codes.OK:
					o.accepted = true
					return
				case codes.Unavailable, codes.DeadlineExceeded:
					continue
				}
				o.refused = err
				return
			}
		})
	}
	wg.Wait()
	if st, ok := <-first; ok {
		t.Logf("the restarted follower's first status (%v after its start): applied index %d, calendar %d ms, leader %q",
			time.Since(restarted).Round(time.Millisecond), st.GetAppliedIndex(), st.GetCalendarTimeMs(), st.GetLeaderId())
	}
	for _, o := range outs {
		if !o.accepted {
			t.Errorf("%s (run_at %+d ms) refused: %v (answers %v)", o.key, o.runAt-now, o.refused, o.answers)
		}
	}
	t.Logf("first answers: %s", firstAnswers(outs, func(o *outcome) string { return o.answers[0] }))

	// Beyond 366 days is still refused, by the leader (its FSM, at its
	// calendar stamp: "nothing was submitted" is the FSM's verdict), in
	// days.
	_, err = qc.Submit(ctx, &coordv1.QueueSubmitRequest{Jobs: []*coordv1.NewJob{{Queue: "v", Kind: "delayed", RunAt: pbtime.At(now + 400*day)}}})
	msg := status.Convert(err).Message()
	if status.Code(err) != codes.InvalidArgument || coorderr.Metadata(err)["field"] != "run_at" ||
		!strings.Contains(msg, "the limit is 366 days") || !strings.Contains(msg, "nothing was submitted") {
		t.Fatalf("400 days ahead: %v %v", err, coorderr.Metadata(err))
	}
	t.Logf("400 days ahead: %s", msg)

	// Every accepted job is there once, with its run_at.
	list, err := coordv1.NewQueueClient(leader.Conn).List(ctx, &coordv1.QueueListRequest{Queue: "v", Kind: "delayed", PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, j := range list.GetJobs() {
		got[j.GetUniqueKey()] = j.GetRunAtMs()
	}
	for _, o := range outs {
		if got[o.key] != o.runAt {
			t.Errorf("%s: run_at %d, want %d", o.key, got[o.key], o.runAt)
		}
	}
	if len(got) != len(outs) {
		t.Errorf("%d jobs listed, want %d", len(got), len(outs))
	}
	d := r.c.WaitConverged()
	t.Logf("all nodes at digest %s", d[:12])
}

// firstAnswers counts the outcomes by what answer picks.
func firstAnswers[O any](outs []O, answer func(O) string) string {
	n := map[string]int{}
	for _, o := range outs {
		n[answer(o)]++
	}
	return fmt.Sprint(n)
}
