//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/delivery"
	"github.com/coordd/coordd/internal/proccluster"
	coordv1 "github.com/coordd/coordd/proto/coord/v1"
	"github.com/coordd/coordd/webhook"
)

// Delivery to an HTTP target (issue 26, docs/delivery.md) under faults.

// heldEndpoint holds every first attempt until released (or until its
// connection goes: the delivering node died) and answers every other at
// once; an answer first makes the job's effect with one FencedCommit
// fenced by the request's Coordd-Fencing-Token and keyed by the job.
type heldEndpoint struct {
	sdk      *client.Client
	verifier *webhook.Verifier
	release  chan struct{}

	mu       sync.Mutex
	seen     map[uint64][]string // job → tokens of the requests, in order
	effects  map[uint64]int      // job → first (not duplicate) accepted effects
	badSigs  int
	held     map[uint64]bool // job → its first attempt is being held now
	answered map[string]int  // token → HTTP status answered
}

func (e *heldEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	id, _ := strconv.ParseUint(r.Header.Get(delivery.HeaderJobID), 10, 64)
	token := r.Header.Get(delivery.HeaderToken)
	e.mu.Lock()
	e.seen[id] = append(e.seen[id], token)
	if e.verifier.Verify(r.Header, body) != nil {
		e.badSigs++
	}
	first := r.Header.Get(delivery.HeaderAttempt) == "1"
	if first {
		e.held[id] = true
	}
	e.mu.Unlock()
	if first {
		select {
		case <-e.release:
		case <-r.Context().Done(): // the delivering node is gone
			e.mu.Lock()
			e.held[id] = false
			e.mu.Unlock()
			return
		}
	}
	status := http.StatusOK
	c, err := e.sdk.FencedCommit(r.Context(), "effects/"+strconv.FormatUint(id, 10), token, "job-"+strconv.FormatUint(id, 10), []byte(token))
	switch {
	case err != nil:
		status = http.StatusConflict // fenced out: the attempt is no longer live
	case !c.Duplicate:
		e.mu.Lock()
		e.effects[id]++
		e.mu.Unlock()
	}
	e.mu.Lock()
	e.answered[token] = status
	e.mu.Unlock()
	w.WriteHeader(status)
}

// Scenario 19: the leader is killed with kill -9 while its deliverer
// holds requests open. Its attempts stop heartbeating and lapse after the
// visibility timeout; other nodes deliver them again (attempt 2), and the
// dead attempts' tokens are refused by FencedCommit. 0 lost, 0 duplicate
// effects.
func TestDeliveryLeaderKilledMidDelivery(t *testing.T) {
	secret := webhook.NewSecret()
	secrets := filepath.Join(t.TempDir(), "delivery-secrets")
	if err := os.WriteFile(secrets, []byte("app "+secret.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newRunOn(t, func() *proccluster.TestCluster {
		return proccluster.Start(t, coorddBin, 3, "--delivery-allow", "127.0.0.1", "--delivery-secrets", secrets)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sdk := r.sdk(ctx, "endpoint")
	ep := &heldEndpoint{sdk: sdk, verifier: &webhook.Verifier{Secrets: []webhook.Secret{secret}}, release: make(chan struct{}),
		seen: map[uint64][]string{}, effects: map[uint64]int{}, held: map[uint64]bool{}, answered: map[string]int{}}
	srv := httptest.NewServer(ep)
	defer srv.Close()
	qc := queue.New(r.sdk(ctx, "submitter"))
	const vt = 3 * time.Second
	leader := r.c.WaitLeader()

	// One job per submit, each waiting for its request: the leader serves
	// the nodes' long polls in turn, so each node holds some. Until the
	// leader's deliverer holds two.
	var ids []uint64
	onLeader := map[uint64]string{} // job → the token of its attempt held by the leader
	for i := 0; len(onLeader) < 2; i++ {
		if i == 30 {
			t.Fatalf("30 jobs, %d of them held by the leader %s", len(onLeader), leader.ID)
		}
		sub := submitAll(t, ctx, qc, []*coordv1.NewJob{{Queue: "hooks", Kind: "hook", Args: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			UniqueKey: fmt.Sprintf("hook-%d", i), VisibilityTimeoutMs: vt.Milliseconds(), BackoffInitialMs: 100,
			// The request may take a minute (the attempt heartbeats meanwhile).
			Target: &coordv1.HttpTarget{Url: srv.URL + "/hook", Secret: "app", Timeout: durationpb.New(time.Minute)}}})
		var id uint64
		for id = range sub {
		}
		ids = append(ids, id)
		r.await(fmt.Sprintf("job %d held", id), 20*time.Second, func() bool {
			ep.mu.Lock()
			defer ep.mu.Unlock()
			return ep.held[id]
		})
		j, err := qc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if a := j.GetAttemptLog()[0]; a.GetWorkerId() == "coordd-delivery/"+leader.ID {
			onLeader[id] = a.GetToken()
		}
	}
	t.Logf("%d jobs held, %d of them by the leader %s; killing it", len(ids), len(onLeader), leader.ID)
	r.c.Kill(leader)
	killed := time.Now()

	// The leader's attempts lapse and are delivered again by the others.
	r.awaitSlow("the killed leader's jobs delivered again", 60*time.Second, func() bool {
		ep.mu.Lock()
		defer ep.mu.Unlock()
		for id := range onLeader {
			if len(ep.seen[id]) < 2 || ep.answered[ep.seen[id][len(ep.seen[id])-1]] != http.StatusOK {
				return false
			}
		}
		return true
	})
	t.Logf("redelivered %s after the kill (visibility timeout %s)", time.Since(killed).Round(time.Millisecond), vt)
	// A stale delivery's write, with its token, is refused.
	for id, tok := range onLeader {
		_, err := sdk.FencedCommit(ctx, "effects/"+strconv.FormatUint(id, 10), tok, "late-"+tok, []byte("late"))
		if err == nil || !(errors.Is(err, client.ErrStaleToken) || strings.Contains(err.Error(), "ATTEMPT_EXPIRED")) {
			t.Errorf("job %d: the killed leader's token %s wrote: %v; want STALE_TOKEN or ATTEMPT_EXPIRED", id, tok, err)
		}
	}
	close(ep.release) // the survivors' held requests answer now
	r.c.Restart(leader)
	for _, id := range ids {
		r.awaitSlow(fmt.Sprintf("job %d succeeded", id), 30*time.Second, func() bool {
			j, err := qc.Get(ctx, id)
			return err == nil && j.GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED
		})
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, id := range ids {
		if ep.effects[id] != 1 {
			t.Errorf("job %d: %d effects, want 1 (requests %v)", id, ep.effects[id], ep.seen[id])
		}
		j, err := qc.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var outcomes []string
		for _, a := range j.GetAttemptLog() {
			outcomes = append(outcomes, fmt.Sprintf("%d:%s@%s %s", a.GetNumber(), strings.TrimPrefix(a.GetOutcome().String(), "ATTEMPT_OUTCOME_"), a.GetWorkerId(), a.GetError()))
		}
		_, again := onLeader[id]
		t.Logf("job %d: %v", id, outcomes)
		if !again && len(outcomes) != 1 {
			t.Errorf("job %d (held by a survivor, which heartbeats through the failover): attempts %v, want one", id, outcomes)
		}
		if again && (len(outcomes) != 2 || j.GetAttemptLog()[0].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED) {
			t.Errorf("job %d (held by the killed leader): attempts %v, want 1 LAPSED then 2 SUCCEEDED", id, outcomes)
		}
	}
	if ep.badSigs > 0 {
		t.Errorf("%d requests with a bad signature", ep.badSigs)
	}
	r.check()
}
