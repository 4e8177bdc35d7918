package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/testcluster"
	"github.com/coordd/coordd/internal/testutil"
)

func waitFor(t *testing.T, what string, o *testutil.Buffer, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m := re.FindStringSubmatch(o.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s; output:\n%s", what, o.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Two replicas on a three-node cluster: one is elected and writes its
// ledger, the other observes it; when the leader stops (resigns), the other
// is elected with the next generation and its observer saw the hand-over.
func TestElectionExample(t *testing.T) {
	c := testcluster.New(t, 3)
	cfg := config{endpoints: c.Endpoints(), name: "svc/leader", ttl: 2 * time.Second, interval: 50 * time.Millisecond}
	outs := map[string]*testutil.Buffer{}
	cancels := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b"} {
		cl, err := client.New(context.Background(), c.Endpoints(), client.WithOwner(id))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		o := &testutil.Buffer{}
		outs[id], cancels[id] = o, cancel
		rc := cfg
		rc.id = id
		wg.Go(func() {
			if err := serve(ctx, cl, rc, o); err != nil {
				t.Errorf("replica %s: %v", id, err)
			}
		})
	}
	elected := regexp.MustCompile(`elected id=(\w) generation=(\d+)`)
	var leader, follower string
	deadline := time.Now().Add(30 * time.Second)
	for leader == "" {
		for id, o := range outs {
			if elected.MatchString(o.String()) {
				leader = id
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("nobody elected")
		}
		time.Sleep(20 * time.Millisecond)
	}
	follower = map[string]string{"a": "b", "b": "a"}[leader]
	gen := waitFor(t, "the leader's generation", outs[leader], elected)[2]
	waitFor(t, "the leader's ledger", outs[leader], regexp.MustCompile(`commit id=`+leader+` generation=`+gen+` seq=2 accepted`))
	waitFor(t, "the follower observing the leader", outs[follower],
		regexp.MustCompile(`observed leader=`+leader+` generation=`+gen+` held=true value="id=`+leader+` serving since`))
	if regexp.MustCompile(`(?m)^elected `).MatchString(outs[follower].String()) {
		t.Fatalf("both elected:\n%s\n%s", outs[leader], outs[follower])
	}

	cancels[leader]() // SIGTERM: it resigns
	waitFor(t, "the resignation", outs[leader], regexp.MustCompile(`resigned id=`+leader+` generation=`+gen+` at=\d+ err=<nil>`))
	next := fmt.Sprint(mustAtoi(t, gen) + 1)
	waitFor(t, "the follower elected", outs[follower], regexp.MustCompile(`elected id=`+follower+` generation=`+next))
	waitFor(t, "the follower's ledger", outs[follower], regexp.MustCompile(`commit id=`+follower+` generation=`+next+` seq=1 accepted`))
	o := outs[follower].String()
	if !strings.Contains(o, `observed leader=`+leader+` generation=`+gen+` held=false`) {
		t.Fatalf("the follower did not observe the resignation:\n%s", o)
	}
	cancels[follower]()
	wg.Wait()
	// Nothing refused: each wrote only while it led.
	for id, o := range outs {
		if strings.Contains(o.String(), "refused") {
			t.Fatalf("%s had a write refused:\n%s", id, o)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
