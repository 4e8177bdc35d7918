//go:build faults

package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
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
	lateOK   bool
	url      string

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
	case err != nil && !e.lateOK:
		status = http.StatusConflict // fenced out: the attempt is no longer live
	case err != nil: // a late 2xx: the write was refused, the endpoint answers 200 all the same
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
// deliveryRun starts a cluster whose nodes deliver to 127.0.0.1 with a
// signing secret, and a heldEndpoint (lateOK: it answers 200 also when
// its fenced write was refused, as an endpoint that does not fence would).
func deliveryRun(t *testing.T, lateOK bool) (*run, *heldEndpoint, *queue.Client, context.Context) {
	secret := webhook.NewSecret()
	secrets := filepath.Join(t.TempDir(), "delivery-secrets")
	if err := os.WriteFile(secrets, []byte("app "+secret.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newRunOn(t, func() *proccluster.TestCluster {
		// 64 requests to the one target per node: the endpoint holds
		// first attempts open, and the scenarios submit until a follower
		// holds one (up to 30 jobs); with the default 16, a leader that
		// won 16 fetches would hold the next job waiting for a slot,
		// never sent.
		return proccluster.Start(t, coorddBin, 3, "--delivery-allow", "127.0.0.1", "--delivery-secrets", secrets,
			"--delivery-per-target", "64")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	ep := &heldEndpoint{sdk: r.sdk(ctx, "endpoint"), verifier: &webhook.Verifier{Secrets: []webhook.Secret{secret}}, release: make(chan struct{}),
		lateOK: lateOK, seen: map[uint64][]string{}, effects: map[uint64]int{}, held: map[uint64]bool{}, answered: map[string]int{}}
	srv := httptest.NewServer(ep)
	t.Cleanup(srv.Close)
	ep.url = srv.URL + "/hook"
	awaitDeliverersPolling(t, r, 3)
	return r, ep, queue.New(r.sdk(ctx, "submitter")), ctx
}

// awaitDeliverersPolling waits until n delivery fetches wait on the
// leader (its coordd_fetch_waiters gauge; the scenarios run no other
// workers): every node's deliverer is then long-polling, first in, first
// served, so the scenarios' first jobs spread over the nodes. A node's
// deliverer that started before the cluster had a leader is in its retry
// backoff (up to 2 s) for a while; a job submitted then goes to the
// others.
func awaitDeliverersPolling(t *testing.T, r *run, n int) {
	t.Helper()
	leader := r.c.WaitLeader()
	r.await(fmt.Sprintf("%d delivery fetches waiting on the leader %s", n, leader.ID), 30*time.Second, func() bool {
		resp, err := http.Get("http://" + leader.HTTPAddr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "coordd_fetch_waiters "); ok {
				f, err := strconv.ParseFloat(v, 64)
				return err == nil && f >= float64(n)
			}
		}
		return false
	})
}

// submitHeld submits job i (one per submit) and waits until the endpoint
// holds its first attempt; it returns the job's id and the worker that
// holds it.
func submitHeld(t *testing.T, r *run, ctx context.Context, qc *queue.Client, ep *heldEndpoint, i int) (uint64, *coordv1.JobAttempt) {
	t.Helper()
	sub := submitAll(t, ctx, qc, []*coordv1.NewJob{{Queue: "hooks", Kind: "hook", Args: []byte(fmt.Sprintf(`{"n":%d}`, i)),
		UniqueKey: fmt.Sprintf("hook-%d", i), VisibilityTimeout: durationpb.New(deliveryVT), BackoffInitial: durationpb.New(100 * time.Millisecond),
		// The request may take a minute (the attempt heartbeats meanwhile).
		Target: &coordv1.HttpTarget{Url: ep.url, Secret: "app", Timeout: durationpb.New(time.Minute)}}})
	var id uint64
	for id = range sub {
	}
	r.await(fmt.Sprintf("job %d held", id), 20*time.Second, func() bool {
		ep.mu.Lock()
		defer ep.mu.Unlock()
		return ep.held[id]
	})
	j, err := qc.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return id, j.GetAttemptLog()[0]
}

// deliveryVT is the visibility timeout of the scenarios' jobs.
const deliveryVT = 3 * time.Second

// attempts renders a job's attempt log.
func attempts(j *coordv1.QueueJob) []string {
	var out []string
	for _, a := range j.GetAttemptLog() {
		out = append(out, fmt.Sprintf("%d:%s@%s %s", a.GetNumber(), strings.TrimPrefix(a.GetOutcome().String(), "ATTEMPT_OUTCOME_"), a.GetWorkerId(), a.GetError()))
	}
	return out
}

func TestDeliveryLeaderKilledMidDelivery(t *testing.T) {
	r, ep, qc, ctx := deliveryRun(t, false)
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
		id, a := submitHeld(t, r, ctx, qc, ep, i)
		ids = append(ids, id)
		if a.GetWorkerId() == "coordd-delivery/"+leader.ID {
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
	t.Logf("redelivered %s after the kill (visibility timeout %s)", time.Since(killed).Round(time.Millisecond), deliveryVT)
	// A stale delivery's write, with its token, is refused.
	for id, tok := range onLeader {
		_, err := ep.sdk.FencedCommit(ctx, "effects/"+strconv.FormatUint(id, 10), tok, "late-"+tok, []byte("late"))
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
		outcomes := attempts(j)
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

// Scenario 20: a follower frozen with SIGSTOP while its deliverer holds a
// request open; the endpoint answers it 200 only after the attempt lapsed
// and another node delivered the job again (attempt 2 made the effect).
// The late 2xx is refused (the job stays attempt 2's success), the late
// attempt's fenced write is refused, the effect happened once.
func TestDeliveryLateAnswerAfterLapse(t *testing.T) {
	r, ep, qc, ctx := deliveryRun(t, true)
	leader := r.c.WaitLeader()
	var id uint64
	var frozen *proccluster.Node
	for i := 0; frozen == nil; i++ {
		if i == 30 {
			t.Fatal("30 jobs, none held by a follower")
		}
		jid, a := submitHeld(t, r, ctx, qc, ep, i)
		for _, nd := range r.c.Nodes {
			if nd != leader && a.GetWorkerId() == "coordd-delivery/"+nd.ID {
				id, frozen = jid, nd
			}
		}
	}
	r.c.Signal(frozen, syscall.SIGSTOP)
	stopped := time.Now()
	r.awaitSlow("attempt 2 delivered and succeeded", 60*time.Second, func() bool {
		j, err := qc.Get(ctx, id)
		return err == nil && j.GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED
	})
	close(ep.release) // the endpoint answers the frozen node's request: 200, late
	r.c.Signal(frozen, syscall.SIGCONT)
	t.Logf("%s frozen for %s (visibility timeout %s)", frozen.ID, time.Since(stopped).Round(time.Millisecond), deliveryVT)
	// Its Complete is refused, or its next heartbeat (refused) ends the
	// request first: either way the late 2xx is not the job's success.
	r.awaitSlow("the frozen node's late 2xx refused", 30*time.Second, func() bool {
		logs, _ := os.ReadFile(frozen.LogPath)
		return strings.Contains(string(logs), "delivery report refused") || strings.Contains(string(logs), "delivery attempt ended while its request ran")
	})
	j, err := qc.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("job %d: %s %v", id, j.GetState(), attempts(j))
	log := j.GetAttemptLog()
	if j.GetState() != coordv1.JobState_JOB_STATE_SUCCEEDED || len(log) != 2 || log[0].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_LAPSED ||
		log[1].GetOutcome() != coordv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED {
		t.Errorf("job %d: %v, want 1 LAPSED then 2 SUCCEEDED", id, attempts(j))
	}
	ep.mu.Lock()
	if ep.effects[id] != 1 || len(ep.seen[id]) != 2 || ep.answered[ep.seen[id][0]] != http.StatusOK {
		t.Errorf("job %d: %d effects, requests %v answered %v; want one effect and two 200s", id, ep.effects[id], ep.seen[id], ep.answered)
	}
	ep.mu.Unlock()
	r.check()
}

// Scenario 21: the endpoint, a Node process (test/delivery-endpoint, the
// Standard Webhooks library from npm, FencedCommit over HTTP), frozen
// with SIGSTOP while jobs are delivered to it, for three request
// timeouts. The requests time out and fail retryably; after SIGCONT the
// frozen requests it finally answers are fenced out (their attempts
// ended), the retries succeed: 0 lost, 0 duplicate effects.
func TestDeliveryEndpointFrozen(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("node is not installed (scripts/test.sh installs Debian's nodejs)")
	}
	src, err := filepath.Abs("../../test/delivery-endpoint")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "node_modules")); err != nil {
		t.Skipf("%s has no node_modules (scripts/test.sh runs npm ci there)", src)
	}
	secret := webhook.NewSecret()
	secrets := filepath.Join(t.TempDir(), "delivery-secrets")
	if err := os.WriteFile(secrets, []byte("node "+secret.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := newRunOn(t, func() *proccluster.TestCluster {
		return proccluster.StartNodes(t, coorddBin, proccluster.LoopbackNodes(3, true, "--delivery-allow", "127.0.0.1", "--delivery-secrets", secrets))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	qc := queue.New(r.sdk(ctx, "submitter"))
	// The endpoint writes through a follower's HTTP API (forwarded).
	var via *proccluster.Node
	for _, nd := range r.c.Nodes {
		if nd != r.c.WaitLeader() {
			via = nd
		}
	}
	logPath := filepath.Join(r.dir, "endpoint.jsonl")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	ep := exec.Command("node", "server.mjs")
	ep.Dir, ep.Stdout, ep.Stderr = src, logf, logf
	ep.Env = append(os.Environ(), "COORDD_HTTP=http://"+via.HTTPAddr, "COORDD_SECRET="+secret.String())
	ep.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = ep.Process.Signal(syscall.SIGCONT)
		_ = ep.Process.Kill()
		_ = ep.Wait()
	}()
	type line struct {
		Listening string `json:"listening"`
		Job       string `json:"job"`
		Verified  bool   `json:"verified"`
		Accepted  bool   `json:"accepted"`
		Duplicate bool   `json:"duplicate"`
	}
	lines := func() []line {
		b, _ := os.ReadFile(logPath)
		var out []line
		for _, l := range strings.Split(string(b), "\n") {
			var x line
			if json.Unmarshal([]byte(l), &x) == nil {
				out = append(out, x)
			}
		}
		return out
	}
	var url string
	r.await("the endpoint listens", 20*time.Second, func() bool {
		for _, l := range lines() {
			url = cmp.Or(url, l.Listening)
		}
		return url != ""
	})
	const timeout = time.Second
	const n = 40
	var jobs []*coordv1.NewJob
	for i := range n {
		jobs = append(jobs, &coordv1.NewJob{Queue: "frozen-endpoint", Kind: "hook", Args: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			UniqueKey: fmt.Sprintf("fe-%d", i), VisibilityTimeout: durationpb.New(5 * time.Second), BackoffInitial: durationpb.New(200 * time.Millisecond), BackoffMax: durationpb.New(time.Second),
			Target: &coordv1.HttpTarget{Url: url + "/hook", Secret: "node", Timeout: durationpb.New(timeout)}})
	}
	// Half before the freeze, half during it.
	want := submitAll(t, ctx, qc, jobs[:n/2])
	_ = ep.Process.Signal(syscall.SIGSTOP)
	maps.Copy(want, submitAll(t, ctx, qc, jobs[n/2:]))
	time.Sleep(3 * timeout) // the freeze: requests time out meanwhile
	_ = ep.Process.Signal(syscall.SIGCONT)
	for id := range want {
		r.awaitSlow(fmt.Sprintf("job %d succeeded", id), 60*time.Second, func() bool {
			j, err := qc.Get(ctx, id)
			return err == nil && j.GetState() == coordv1.JobState_JOB_STATE_SUCCEEDED
		})
	}
	effects, fenced, retried := map[string]int{}, 0, 0
	for _, l := range lines() {
		switch {
		case l.Job == "":
		case !l.Verified:
			t.Errorf("job %s: a request the Node library did not verify", l.Job)
		case l.Accepted && !l.Duplicate:
			effects[l.Job]++
		case !l.Accepted:
			fenced++
		}
	}
	for id := range want {
		j, _ := qc.Get(ctx, id)
		if len(j.GetAttemptLog()) > 1 {
			retried++
		}
		if k := strconv.FormatUint(id, 10); effects[k] != 1 {
			t.Errorf("job %d: %d effects, want 1 (attempts %v)", id, effects[k], attempts(j))
		}
	}
	t.Logf("%d jobs, all succeeded; %d delivered more than once, %d late requests fenced out by the endpoint's FencedCommit", n, retried, fenced)
	if retried == 0 {
		t.Error("no job was retried: the freeze did not bite")
	}
	r.check()
}
