package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/coordd/coordd/client"
	"github.com/coordd/coordd/client/queue"
	"github.com/coordd/coordd/internal/testcluster"
)

// The example end to end on a three-node cluster: every job succeeds, the
// flaky ones in two attempts, and every order is charged once (the second
// attempts' charges come back as duplicates). Skipped while the server does
// not serve coord.v1.Queue; it runs as soon as it does.
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
	if _, err := queue.New(cl).Stats(ctx, ""); err != nil {
		var e *client.Error
		if errors.As(err, &e) && e.Code == codes.Unimplemented {
			t.Skipf("coordd does not serve coord.v1.Queue yet (%v): this test runs once the server does", err)
		}
		t.Fatal(err)
	}
	rep, err := run(ctx, cl, config{queue: "example", jobs: 20, concurrency: 4, flakyEvery: 5, timeout: time.Minute})
	if err != nil {
		t.Fatalf("%v (%s)", err, rep)
	}
	if rep.succeeded != 20 || rep.attempts != 24 || rep.charged != 20 || rep.duplicates != 4 {
		t.Fatalf("report: %s; want 20 jobs in 24 attempts, 20 charges and 4 duplicates", rep)
	}
}
