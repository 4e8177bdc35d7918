package main

import (
	"context"
	"testing"
	"time"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/internal/testcluster"
)

// The example end to end on a three-node cluster: every job succeeds, the
// flaky ones in two attempts, and every order is charged once (the second
// attempts' charges come back as duplicates).
func TestQueueWorkerExample(t *testing.T) {
	c := testcluster.New(t, 3)
	c.WaitLeader()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := client.New(ctx, c.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rep, err := run(ctx, cl, config{queue: "example", jobs: 20, concurrency: 4, flakyEvery: 5, timeout: time.Minute})
	if err != nil {
		t.Fatalf("%v (%s)", err, rep)
	}
	if rep.succeeded != 20 || rep.attempts != 24 || rep.charged != 20 || rep.duplicates != 4 {
		t.Fatalf("report: %s; want 20 jobs in 24 attempts, 20 charges and 4 duplicates", rep)
	}
}
